"""Measures the offline guardrails on the project's own labelled sets (bench/guardrail_sets/).

    python bench/guardrails.py                                  # this checkout, both splits, tables
    python bench/guardrails.py --out /tmp/after.json
    git worktree add /tmp/guard-base <commit>                   # the code to compare with
    python bench/guardrails.py --code /tmp/guard-base --out /tmp/before.json
    python bench/guardrails.py --compare /tmp/before.json       # before/after tables (Markdown)

`--code PATH` imports `memproc` from another checkout (the sets always come from this one), so the
same items score the old and the new detectors. Nothing is downloaded; the sets are generated from
fixed seeds, so every run scores the same items.

    MEMPROC_BENCH_PII_SET=/path/to/pii_syn_nano_en.json python bench/guardrails.py

also scores PIIDetector on a labelled set someone else wrote (bench/guardrail_sets/external.py says
where it comes from and how its labels are read), with types email, phone, credit_card, iban, us_ssn
and secret; the source, commit, licence and counts are in the output. With also
`MEMPROC_BENCH_PRESIDIO_MODEL=en_core_web_lg` (a spaCy package, or a saved pipeline's directory; the
`presidio` extra), it scores PIIDetector(engine="presidio") on the same set, the set's person
labels included as "name".

What is measured:
- PIIDetector (types email, phone, credit_card, iban, ip_address; the default strategy): a predicted
  span counts when it overlaps a gold span of the same type (each gold span is matched once);
  "exact" is the share of those whose boundaries are the gold ones. Precision over predicted spans,
  recall over gold spans, FPR over the hard-negative items (an item with any span is a false alarm).
- PromptInjectionDetector (default threshold): one verdict per item; recall per family
  (direct, indirect in a tool result, obfuscated, multilingual); FPR over the benign hard negatives.
  Also with engine="both" (the MiniLM head beside the rules) when the embeddings extra is installed.
- Cross-source (public data, `--public`, on by default when the snapshots, scikit-learn and the
  embeddings extra are here): the sources of bench/guardrail_sets/public_injection.py, each held out
  in turn: the head and its operating point are fitted on the other sources only (the operating point
  from their own leave-one-source-out scores), then the held-out source is scored by the rules, the
  head, and both (the higher score). Recall on its attacks and FPR on its benign items, per language.
  Plus the learned scorer's cost per message: the MiniLM embedding and the head after it, p50.
- ModerationProcessor across sources (`--public` too; bench/guardrails_moderation.py): the lexicon,
  the learned head and both on OpenAI's moderation-api-release and SimpleSafetyTests, sets it was never
  trained on; precision, recall, FPR, recall per category, and the head's cost per message.
- SystemPromptScrubber ("warn", default min_overlap_chars): a response is flagged when it records a leak.
- UnicodeNormalizer (defaults): the share of legitimate texts stored unchanged and of smuggling texts
  cleaned to the expected string.
items/s is the detector's own time over the split (single thread, no warm-up beyond the first item).
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import platform
import sys
import time
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.guardrail_sets import SPLITS, fidelity_items, injection_items, leak_items, pii_items  # noqa: E402
from bench.guardrail_sets.external import LABELS, PRESIDIO_LABELS, pii_external_items  # noqa: E402
from bench.guardrail_sets.pii import TYPES as PII_TYPES  # noqa: E402

EXTERNAL_TYPES = tuple(dict.fromkeys(LABELS.values()))


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 4) if b else None


def _f1(p: float | None, r: float | None) -> float | None:
    if not p or not r:
        return 0.0 if p is not None and r is not None else None
    return round(2 * p * r / (p + r), 4)


def _forget_texts() -> None:
    """Empties the caches the detectors keep of texts they saw (history repeats turn after turn), so
    a repeated item of a set costs what a new one does."""
    for module, name in (
        ("memproc.guardrails._normalize", "_fold"),
        ("memproc.guardrails._injection_rules", "_score_cached"),
    ):
        try:
            cached = getattr(importlib.import_module(module), name, None)
        except ImportError:
            continue
        if cached is not None and hasattr(cached, "cache_clear"):
            cached.cache_clear()


# --- PII ------------------------------------------------------------------------------------------


def measure_pii(
    items: list[dict[str, Any]], types: tuple[str, ...] = PII_TYPES, **options: Any
) -> dict[str, Any]:
    from memproc.guardrails import PIIDetector

    detector = PIIDetector(types=[t for t in types if t != "secret" or _knows_secret()], **options)
    detector.detect("Warm-up: Ada Lovelace was born in London.")  # a model loads at first use
    tp: dict[str, int] = defaultdict(int)
    exact: dict[str, int] = defaultdict(int)
    gold_n: dict[str, int] = defaultdict(int)
    pred_n: dict[str, int] = defaultdict(int)
    by_variant: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    by_phone_locale: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    negatives = false_alarms = 0
    misses: list[dict[str, Any]] = []
    seconds = 0.0
    for item in items:
        text = item["text"]
        _forget_texts()
        start = time.perf_counter()
        found = detector.detect(text)
        seconds += time.perf_counter() - start
        predicted = [(m.start, m.end, m.type) for m in found if m.type in types]
        if item["negative"]:
            negatives += 1
            false_alarms += bool(predicted)
        used: set[int] = set()
        for g_start, g_end, g_type in item["spans"]:
            gold_n[g_type] += 1
            hit = next(
                (
                    i
                    for i, (s, e, t) in enumerate(predicted)
                    if i not in used and t == g_type and s < g_end and e > g_start
                ),
                None,
            )
            by_variant[item["variant"]][1] += 1
            if g_type == "phone":
                by_phone_locale[item["locale"]][1] += 1
            if hit is None:
                if len(misses) < 400:
                    misses.append({"text": text, "gold": text[g_start:g_end], "type": g_type})
                continue
            used.add(hit)
            tp[g_type] += 1
            by_variant[item["variant"]][0] += 1
            if g_type == "phone":
                by_phone_locale[item["locale"]][0] += 1
            exact[g_type] += predicted[hit][:2] == (g_start, g_end)
        for i, (_, _, t) in enumerate(predicted):
            pred_n[t] += 1
            if i not in used and len(misses) < 400:
                misses.append(
                    {"text": text, "false_positive": text[predicted[i][0] : predicted[i][1]], "type": t}
                )
    per_type = {}
    for kind in types:
        p, r = _ratio(tp[kind], pred_n[kind]), _ratio(tp[kind], gold_n[kind])
        per_type[kind] = {
            "precision": p,
            "recall": r,
            "f1": _f1(p, r),
            "gold": gold_n[kind],
            "predicted": pred_n[kind],
            "exact": _ratio(exact[kind], tp[kind]),
        }
    total_tp, total_pred, total_gold = sum(tp.values()), sum(pred_n.values()), sum(gold_n.values())
    p, r = _ratio(total_tp, total_pred), _ratio(total_tp, total_gold)
    return {
        "detector": "PIIDetector",
        "items": len(items),
        "precision": p,
        "recall": r,
        "f1": _f1(p, r),
        "fpr": _ratio(false_alarms, negatives),
        "items_per_s": round(len(items) / seconds) if seconds else None,
        "per_type": per_type,
        "recall_by_variant": {k: _ratio(*v) for k, v in sorted(by_variant.items())},
        "phone_recall_by_locale": {k: _ratio(*v) for k, v in sorted(by_phone_locale.items())},
        "examples": misses,
    }


def _knows_secret() -> bool:
    """Whether the checkout measured has the "secret" type (older ones do not)."""
    from memproc.guardrails import _pii_patterns

    return "secret" in _pii_patterns.TYPES


# --- prompt injection -----------------------------------------------------------------------------


def measure_injection(items: list[dict[str, Any]], *, learned: bool = False) -> dict[str, Any]:
    from memproc.guardrails import PromptInjectionDetector

    detector = PromptInjectionDetector(engine="both" if learned else "rules")
    tp = fp = fn = tn = 0
    by_family: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    by_obfuscation: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    errors: list[dict[str, Any]] = []
    seconds = 0.0
    for item in items:
        _forget_texts()
        start = time.perf_counter()
        verdict = detector.score(item["text"])
        seconds += time.perf_counter() - start
        flagged = verdict["score"] >= detector.threshold
        by_family[item["family"]][0] += flagged
        by_family[item["family"]][1] += 1
        if item["family"] == "obfuscated":
            by_obfuscation[item["obfuscation"]][0] += flagged
            by_obfuscation[item["obfuscation"]][1] += 1
        if item["label"]:
            tp, fn = tp + flagged, fn + (not flagged)
        else:
            fp, tn = fp + flagged, tn + (not flagged)
        if flagged != bool(item["label"]) and len(errors) < 400:
            errors.append({"family": item["family"], "score": verdict["score"], "text": item["text"][:300]})
    p, r = _ratio(tp, tp + fp), _ratio(tp, tp + fn)
    return {
        "detector": "PromptInjectionDetector" + (" (learned)" if learned else ""),
        "items": len(items),
        "precision": p,
        "recall": r,
        "f1": _f1(p, r),
        "fpr": _ratio(fp, fp + tn),
        "items_per_s": round(len(items) / seconds) if seconds else None,
        "flag_rate_by_family": {k: _ratio(*v) for k, v in sorted(by_family.items())},
        "recall_by_obfuscation": {k: _ratio(*v) for k, v in sorted(by_obfuscation.items())},
        "examples": errors,
    }


def learned_available() -> str | None:
    """Why the learned detector cannot be measured here, or None."""
    try:
        from memproc.guardrails import _injection_model

        _injection_model.check_available()
    except Exception as exc:  # an older checkout (--code) has no such module
        return str(exc)
    return None


def measure_cross_source(root: str | None = None) -> dict[str, Any]:
    """Leave one public source out: fit on the others, score the held-out one (see the docstring)."""
    import numpy as np

    from bench.guardrail_sets import public_injection as data
    from memproc.guardrails._injection_rules import score_text

    items = data.load(root)
    started = time.perf_counter()
    features = data.embed(items)
    embed_seconds = time.perf_counter() - started
    labels = np.array([i["label"] for i in items])
    sources = np.array([i["source"] for i in items])
    rules = np.array([score_text(i["text"]).score for i in items])
    flagged_learned = np.zeros(len(items), dtype=bool)
    for source in data.SOURCES:
        held = sources == source
        pool = ~held
        inner = data.out_of_source_logits(features[pool], labels[pool], sources[pool])
        threshold = data.operating_logit(inner[labels[pool] == 0])
        coef, intercept = data.fit_head(features[pool], labels[pool])
        flagged_learned[held] = data.logits(features[held], coef, intercept) >= threshold
    flagged_rules = rules >= 0.7
    rows = []
    for source in data.SOURCES:
        for lang in sorted({i["lang"] for i in items if i["source"] == source}):
            sel = np.array([i["source"] == source and i["lang"] == lang for i in items])
            row: dict[str, Any] = {
                "source": source,
                "lang": lang,
                "attacks": int((sel & (labels == 1)).sum()),
                "benign": int((sel & (labels == 0)).sum()),
            }
            for name, flags in (
                ("rules", flagged_rules),
                ("learned", flagged_learned),
                ("both", flagged_rules | flagged_learned),
            ):
                pos, neg = sel & (labels == 1), sel & (labels == 0)
                row[f"{name}_recall"] = _ratio(int(flags[pos].sum()), int(pos.sum()))
                row[f"{name}_fpr"] = _ratio(int(flags[neg].sum()), int(neg.sum()))
            rows.append(row)
    totals = {}
    for name, flags in (
        ("rules", flagged_rules),
        ("learned", flagged_learned),
        ("both", flagged_rules | flagged_learned),
    ):
        totals[name] = {
            "recall": _ratio(int(flags[labels == 1].sum()), int((labels == 1).sum())),
            "fpr": _ratio(int(flags[labels == 0].sum()), int((labels == 0).sum())),
        }
    return {
        "items": len(items),
        "counts": data.counts(items),
        "rows": rows,
        "totals": totals,
        "embed_items_per_s": round(len(items) / embed_seconds),
        "latency": measure_learned_latency([i["text"] for i in items[::40]]),
    }


def measure_learned_latency(texts: list[str]) -> dict[str, float]:
    """p50 ms per message, one at a time: the MiniLM embedding, the head after it, and the rules."""
    import statistics

    import numpy as np

    from memproc.guardrails import _injection_model
    from memproc.guardrails._injection_rules import score_text

    head = _injection_model._load()
    embedder = head["embedder"]
    embedder.embed(["warm up"])
    embed_ms, head_ms, rules_ms = [], [], []
    for text in texts:
        start = time.perf_counter()
        vector = np.asarray(embedder.embed([text])[0], dtype=np.float32)
        middle = time.perf_counter()
        _injection_model.to_score(float(vector @ head["coef"] + head["intercept"]), 0.7)
        end = time.perf_counter()
        _forget_texts()
        score_text(text)
        rules_end = time.perf_counter()
        embed_ms.append((middle - start) * 1000)
        head_ms.append((end - middle) * 1000)
        rules_ms.append((rules_end - end) * 1000)
    return {
        "texts": len(texts),
        "embedding_p50_ms": round(statistics.median(embed_ms), 2),
        "head_p50_ms": round(statistics.median(head_ms), 4),
        "rules_p50_ms": round(statistics.median(rules_ms), 2),
    }


def cross_source_markdown(cross: dict[str, Any]) -> str:
    lines = [
        "Cross-source (each public source held out in turn; the head and its operating point fitted "
        "on the others): recall on attacks / FPR on benign, at the default threshold 0.7",
        "",
        "| held-out source | lang | attacks | benign | rules R / FPR | learned R / FPR | both R / FPR |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in cross["rows"]:
        lines.append(
            f"| {row['source']} | {row['lang']} | {row['attacks']:,} | {row['benign']:,} | "
            + " | ".join(
                f"{_fmt(row[f'{n}_recall'])} / {_fmt(row[f'{n}_fpr'])}" for n in ("rules", "learned", "both")
            )
            + " |"
        )
    t = cross["totals"]
    lines.append(
        f"| all | | | | {_fmt(t['rules']['recall'])} / {_fmt(t['rules']['fpr'])} | "
        f"{_fmt(t['learned']['recall'])} / {_fmt(t['learned']['fpr'])} | "
        f"{_fmt(t['both']['recall'])} / {_fmt(t['both']['fpr'])} |"
    )
    lat = cross["latency"]
    lines += [
        "",
        f"Learned scorer, p50 per message over {lat['texts']} texts one at a time: MiniLM embedding "
        f"{lat['embedding_p50_ms']} ms, the head after it {lat['head_p50_ms']} ms (rules "
        f"{lat['rules_p50_ms']} ms); batched embedding {cross['embed_items_per_s']} items/s.",
    ]
    return "\n".join(lines)


# --- system prompt leaks --------------------------------------------------------------------------


def measure_leaks(items: list[dict[str, Any]]) -> dict[str, Any]:
    from memproc.guardrails import SystemPromptScrubber
    from memproc.messages import Message
    from memproc.processors.base import ProcessorContext

    scrubber = SystemPromptScrubber(strategy="warn")
    tp = fp = fn = tn = 0
    by_variant: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    seconds = 0.0
    for item in items:
        ctx = ProcessorContext(
            processor_id=scrubber.id,
            messages=(Message.create("assistant", item["text"]),),
            phase="output",
            agent=SimpleNamespace(id="bench", instructions=item["prompt"]),
            state={},
        )
        start = time.perf_counter()
        scrubber.process_output_result(ctx)
        seconds += time.perf_counter() - start
        flagged = bool(ctx.state.get("leaks"))
        by_variant[item["variant"]][0] += flagged
        by_variant[item["variant"]][1] += 1
        if item["label"]:
            tp, fn = tp + flagged, fn + (not flagged)
        else:
            fp, tn = fp + flagged, tn + (not flagged)
    p, r = _ratio(tp, tp + fp), _ratio(tp, tp + fn)
    return {
        "detector": "SystemPromptScrubber",
        "items": len(items),
        "precision": p,
        "recall": r,
        "f1": _f1(p, r),
        "fpr": _ratio(fp, fp + tn),
        "items_per_s": round(len(items) / seconds) if seconds else None,
        "flag_rate_by_variant": {k: _ratio(*v) for k, v in sorted(by_variant.items())},
    }


# --- normalizer fidelity --------------------------------------------------------------------------


def measure_fidelity(items: list[dict[str, Any]]) -> dict[str, Any]:
    from memproc.guardrails import UnicodeNormalizer

    normalizer = UnicodeNormalizer()
    kept = cleaned = legit = smuggled = 0
    wrong: list[dict[str, str]] = []
    for item in items:
        out = normalizer.normalize(item["text"])
        ok = out == item["expected"]
        if item["kind"] == "legitimate":
            legit += 1
            kept += ok
        else:
            smuggled += 1
            cleaned += ok
        if not ok:
            wrong.append({"text": item["text"], "stored": out, "expected": item["expected"]})
    return {
        "detector": "UnicodeNormalizer",
        "items": len(items),
        "legitimate_kept": _ratio(kept, legit),
        "smuggling_removed": _ratio(cleaned, smuggled),
        "examples": wrong,
    }


# --- running and reporting ------------------------------------------------------------------------


def run(code: str | None, *, public: bool = True) -> dict[str, Any]:
    logging.getLogger("memproc.guardrails").setLevel(logging.ERROR)
    if code:
        sys.path.insert(0, str(Path(code).resolve()))
    import memproc

    results: dict[str, Any] = {
        "code": str(Path(memproc.__file__).resolve().parents[1]),
        "python": platform.python_version(),
        "when": time.strftime("%Y-%m-%d %H:%M"),
        "splits": {},
    }
    missing = learned_available()
    for split in SPLITS:
        results["splits"][split] = {
            "pii": measure_pii(pii_items(split)),
            "injection": measure_injection(injection_items(split)),
            "leaks": measure_leaks(leak_items(split)),
        }
        if missing is None:
            results["splits"][split]["injection_learned"] = measure_injection(
                injection_items(split),
                learned=True,  # engine="both"
            )
    results["fidelity"] = measure_fidelity(fidelity_items())
    external = os.environ.get("MEMPROC_BENCH_PII_SET")
    if external:
        items, info = pii_external_items(external)
        results["external_pii"] = {"source": info, **measure_pii(items, EXTERNAL_TYPES)}
        presidio_model = os.environ.get("MEMPROC_BENCH_PRESIDIO_MODEL")
        if presidio_model:  # a spaCy package name or a pipeline's directory
            items, info = pii_external_items(external, PRESIDIO_LABELS)
            types = tuple(dict.fromkeys(PRESIDIO_LABELS.values()))
            measured = measure_pii(items, types, engine="presidio", presidio_model=presidio_model)
            results["external_pii_presidio"] = {"source": info, "model": presidio_model, **measured}
    if public:
        results["cross_source"] = _cross_source_or_reason(missing)
        results["moderation_cross_source"] = _moderation_or_reason()
    return results


def _moderation_or_reason() -> dict[str, Any]:
    from bench import guardrails_moderation
    from bench.guardrail_sets.public_moderation import MissingSnapshot

    try:
        from memproc.guardrails import _moderation_model

        _moderation_model.check_available()
    except Exception as exc:  # no embeddings extra, or an older checkout (--code) without the head
        return {"skipped": str(exc)}
    try:
        return guardrails_moderation.measure()
    except MissingSnapshot as exc:
        return {"skipped": str(exc)}


def _cross_source_or_reason(missing: str | None) -> dict[str, Any]:
    if missing is not None:
        return {"skipped": missing}
    try:
        import sklearn  # noqa: F401
    except ImportError:
        return {"skipped": 'needs scikit-learn: pip install -e ".[train]"'}
    from bench.guardrail_sets.public_injection import MissingSnapshot

    try:
        return measure_cross_source()
    except MissingSnapshot as exc:
        return {"skipped": str(exc)}


def _fmt(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.2f}" if value <= 1 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _pair(before: Any, after: Any) -> str:
    return f"{_fmt(before)} → **{_fmt(after)}**" if before is not None else _fmt(after)


def markdown(after: dict[str, Any], before: dict[str, Any] | None = None) -> str:
    """Before → after tables for RESULTS.md."""
    b = before or {"splits": {s: {} for s in SPLITS}, "fidelity": {}}
    lines: list[str] = []
    lines.append("| detector | split | items | precision | recall | F1 | FPR | items/s |")
    lines.append("|---|---|---|---|---|---|---|---|")
    for name in ("pii", "injection", "injection_learned", "leaks"):
        for split in SPLITS:
            if name not in after["splits"][split]:
                continue
            new = after["splits"][split][name]
            old = b["splits"][split].get(name, {})
            lines.append(
                f"| {new['detector']} | {split} | {new['items']:,} | "
                + " | ".join(
                    _pair(old.get(k), new[k]) for k in ("precision", "recall", "f1", "fpr", "items_per_s")
                )
                + " |"
            )
    lines.append("")
    lines.append(
        "PII per structured type (precision / recall; exact = share of hits with the gold boundaries):"
    )
    lines.append("")
    lines.append("| type | split | precision | recall | F1 | exact |")
    lines.append("|---|---|---|---|---|---|")
    for kind in PII_TYPES:
        for split in SPLITS:
            new = after["splits"][split]["pii"]["per_type"][kind]
            old = b["splits"][split].get("pii", {}).get("per_type", {}).get(kind, {})
            lines.append(
                f"| {kind} | {split} | "
                + " | ".join(_pair(old.get(k), new[k]) for k in ("precision", "recall", "f1", "exact"))
                + " |"
            )
    for split in SPLITS:
        lines.append("")
        new = after["splits"][split]
        old = b["splits"][split]
        lines.append(f"{split}: injection flag rate by family (benign families: the false-alarm rate)")
        lines.append("")
        fams = new["injection"]["flag_rate_by_family"]
        lines.append("| " + " | ".join(fams) + " |")
        lines.append("|" + "---|" * len(fams))
        lines.append(
            "| "
            + " | ".join(
                _pair(old.get("injection", {}).get("flag_rate_by_family", {}).get(k), v)
                for k, v in fams.items()
            )
            + " |"
        )
        lines.append("")
        lines.append(f"{split}: injection recall by obfuscation")
        lines.append("")
        obf = new["injection"]["recall_by_obfuscation"]
        lines.append("| " + " | ".join(obf) + " |")
        lines.append("|" + "---|" * len(obf))
        lines.append(
            "| "
            + " | ".join(
                _pair(old.get("injection", {}).get("recall_by_obfuscation", {}).get(k), v)
                for k, v in obf.items()
            )
            + " |"
        )
        lines.append("")
        lines.append(f"{split}: PII recall by spelling of the entity, and phone recall by locale")
        lines.append("")
        var = {
            **new["pii"]["recall_by_variant"],
            **{f"phone {k}": v for k, v in new["pii"]["phone_recall_by_locale"].items()},
        }
        old_var = {
            **old.get("pii", {}).get("recall_by_variant", {}),
            **{f"phone {k}": v for k, v in old.get("pii", {}).get("phone_recall_by_locale", {}).items()},
        }
        lines.append("| " + " | ".join(var) + " |")
        lines.append("|" + "---|" * len(var))
        lines.append("| " + " | ".join(_pair(old_var.get(k), v) for k, v in var.items()) + " |")
        lines.append("")
        lines.append(
            f"{split}: SystemPromptScrubber flag rate by spelling of the leak (benign: false alarms)"
        )
        lines.append("")
        leak = new["leaks"]["flag_rate_by_variant"]
        lines.append("| " + " | ".join(leak) + " |")
        lines.append("|" + "---|" * len(leak))
        lines.append(
            "| "
            + " | ".join(
                _pair(old.get("leaks", {}).get("flag_rate_by_variant", {}).get(k), v) for k, v in leak.items()
            )
            + " |"
        )
    lines.append("")
    fid, old_fid = after["fidelity"], b.get("fidelity", {})
    lines.append("| UnicodeNormalizer | legitimate text stored unchanged | smuggling characters removed |")
    lines.append("|---|---|---|")
    lines.append(
        f"| {fid['items']} texts | {_pair(old_fid.get('legitimate_kept'), fid['legitimate_kept'])} | "
        f"{_pair(old_fid.get('smuggling_removed'), fid['smuggling_removed'])} |"
    )
    if "external_pii" in after:
        lines.extend(_external_markdown(after["external_pii"], b.get("external_pii", {})))
    if "external_pii_presidio" in after:
        new = after["external_pii_presidio"]
        lines += ["", f'With engine="presidio" and the spaCy model {new["model"]}:']
        lines.extend(_external_markdown(new, b.get("external_pii_presidio", {})))
    cross = after.get("cross_source")
    if cross:
        lines.append("")
        lines.append(
            f"Cross-source: skipped ({cross['skipped']})"
            if "skipped" in cross
            else cross_source_markdown(cross)
        )
    if "moderation_cross_source" in after:
        from bench import guardrails_moderation

        lines += ["", guardrails_moderation.markdown(after["moderation_cross_source"])]
    return "\n".join(lines)


def _external_markdown(new: dict[str, Any], old: dict[str, Any]) -> list[str]:
    src = new["source"]
    lines = [
        "",
        f"PIIDetector on {src['name']} ({src['file']}, commit {src['commit'][:7]}, {src['licence']}; "
        f"{src['records']} sentences, {src['without_pii']} without personal data; gold kept "
        f"{sum(src['gold_kept'].values())}, dropped as masked or absent {sum(src['gold_dropped'].values())})",
        "",
        "| type | gold | precision | recall | exact |",
        "|---|---|---|---|---|",
    ]
    for kind, row in new["per_type"].items():
        was = old.get("per_type", {}).get(kind, {})
        lines.append(
            f"| {kind} | {row['gold']} | "
            + " | ".join(_pair(was.get(k), row[k]) for k in ("precision", "recall", "exact"))
            + " |"
        )
    lines.append(
        f"| all | {sum(r['gold'] for r in new['per_type'].values())} | "
        + " | ".join(_pair(old.get(k), new[k]) for k in ("precision", "recall"))
        + f" | FPR {_pair(old.get('fpr'), new['fpr'])} |"
    )
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--code", help="import memproc from this checkout instead of this one")
    parser.add_argument("--out", help="write the full results (with error examples) as JSON here")
    parser.add_argument("--compare", help="a JSON file from an earlier run: print before/after tables")
    parser.add_argument(
        "--no-public", action="store_true", help="skip the cross-source measurement on public data (minutes)"
    )
    args = parser.parse_args(argv)
    results = run(args.code, public=not args.no_public)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1, ensure_ascii=False))
    before = json.loads(Path(args.compare).read_text()) if args.compare else None
    print(markdown(results, before))


if __name__ == "__main__":
    main()
