"""Labelled sets for measuring memproc's guardrails, generated deterministically (no downloads).

    from bench.guardrail_sets import pii_items, injection_items, leak_items, fidelity_items

`pii_items` (personal data with gold spans, and hard negatives), `injection_items` (attacks and benign
hard negatives), `leak_items` (system-prompt leaks in several spellings) take `split="dev" |
"heldout"` and return a list of dicts; `fidelity_items` (legitimate Unicode text and smuggling) is one
small fixed list. The two splits use different seeds, different carrier sentences, some phone formats
and attack phrasings only the held-out split has (and Polish and Russian attacks): detectors are tuned
on "dev", and "heldout" shows whether the tuning generalises. The sets were written from the threat
descriptions of issue #21 (formats people write, attacks people send) before the detectors were
improved, by the same author; they import nothing from memproc, so they cannot borrow a detector's
own patterns.
"""

from bench.guardrail_sets.fidelity import fidelity_items
from bench.guardrail_sets.injection import injection_items
from bench.guardrail_sets.leaks import leak_items
from bench.guardrail_sets.pii import pii_items

SPLITS = ("dev", "heldout")

__all__ = ["SPLITS", "fidelity_items", "injection_items", "leak_items", "pii_items"]
