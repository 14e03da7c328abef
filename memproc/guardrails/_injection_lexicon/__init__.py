"""The phrase rules of the offline prompt-injection scorer, by category and language.

Every pattern runs on a canonical copy of the text (see `_injection_rules`): NFKC, look-alike letters
folded to Latin, invisible characters dropped, case-folded and WITHOUT ACCENTS, so the word lists
below are written lower-case and unaccented ("precedentes", "ausser kraft"). `W` is a character
inside the same sentence.

The rules aim at what an attack has to say, in any phrasing: an override verb, a scope word and the
object overridden ("ignore | all previous | instructions"); a persona that has no rules; a request
for the hidden prompt; text that pretends to be a chat-template turn; text in a document that speaks
to the AI reading it and tells it what to do or to keep quiet. A weight says how sure one hit makes
us; the scorer combines hits as a noisy OR. English, German, French, Spanish, Italian, Portuguese and
Dutch are covered.
"""

from __future__ import annotations

import re

from memproc.guardrails._injection_lexicon.base import Rule, W, rule
from memproc.guardrails._injection_lexicon.documents import DOCUMENT_RULES
from memproc.guardrails._injection_lexicon.english import OTHER_RULES
from memproc.guardrails._injection_lexicon.languages import multilingual_rules
from memproc.guardrails._injection_lexicon.override import OVERRIDE, override_rules

__all__ = ["OVERRIDE", "RULES", "W", "Rule", "leet_tolerant", "rule"]

RULES: tuple[Rule, ...] = (*override_rules(), *OTHER_RULES, *DOCUMENT_RULES, *multilingual_rules())


_LEET_PATTERNS: dict[int, re.Pattern[str]] = {}


def leet_tolerant(rule: Rule) -> re.Pattern[str]:
    """The rule's pattern with "i" and "l" each standing for either: leetspeak writes both as "1"
    ("p011cy", "gu1d3l1n35"), and the leet copy of a text reads every "1" as "i". The patterns hold no
    escape, class or flag with those letters, so the rewrite is safe; built once per rule."""
    pattern = _LEET_PATTERNS.get(id(rule))
    if pattern is None:
        pattern = re.compile(_either_i_or_l(rule.pattern.pattern))
        _LEET_PATTERNS[id(rule)] = pattern
    return pattern


def _either_i_or_l(source: str) -> str:
    out: list[str] = []
    in_class = escaped = False
    for char in source:
        if escaped:
            out.append(char)
            escaped = False
        elif char == "\\":
            out.append(char)
            escaped = True
        elif in_class:
            out.append(char)
            in_class = char != "]"
        elif char == "[":
            out.append(char)
            in_class = True
        else:
            out.append("[il]" if char in "il" else char)
    return "".join(out)
