"""ModerationProcessor across sources (part of bench/guardrails.py): the lexicon ("rules"), the learned
head ("model") and both, on public labelled sets the head was never trained on.

The sets (bench/guardrail_sets/public_moderation.py, TEST_SOURCES): OpenAI's moderation-api-release
(1,680 texts, 1,657 distinct; its eight labels folded into memproc's five categories) and
SimpleSafetyTests (the 60 prompts whose harm area is one of them). Each text is scored by the shipped
lexicon and head at the default threshold (the head's texts embedded in batches). A text counts as
flagged when any category reaches the threshold and as harmful when its set gives it any category;
per category, recall is the share of the texts labelled with it that are flagged for it. "both" takes,
per category, the higher of the two scores, so it flags what either engine flags: it is counted as
the union of the two runs (the processor computes the same).
"""

from __future__ import annotations

import statistics
import time
from typing import Any


def _ratio(a: int, b: int) -> float | None:
    return round(a / b, 4) if b else None


def _rules_flags(items: list[dict[str, Any]]) -> list[set[str]]:
    from memproc.guardrails import ModerationProcessor

    processor = ModerationProcessor(engine="rules")
    return [set(processor.flagged(processor.moderate(item["text"]))) for item in items]


def _model_flags(items: list[dict[str, Any]], threshold: float = 0.5) -> list[set[str]]:
    """What ModerationProcessor(engine="model") flags, with the texts embedded in batches (the same
    vectors as one at a time, minutes sooner on 2 cores) and the shipped head's own scale."""
    from memproc.guardrails import _moderation_model

    rows = _moderation_model.raw_logits([item["text"] for item in items])
    flags = []
    for logits in rows:
        scores = _moderation_model.to_scores(logits, threshold)
        flags.append({c for c, s in scores.items() if s >= threshold})
    return flags


def _scores(
    items: list[dict[str, Any]], flags: list[set[str]], categories: tuple[str, ...]
) -> dict[str, Any]:
    tp = fp = fn = tn = 0
    per_category = {c: [0, 0, 0] for c in categories}  # hit, labelled, flagged
    for item, found in zip(items, flags, strict=True):
        harmful = bool(item["categories"])
        if harmful:
            tp, fn = tp + bool(found), fn + (not found)
        else:
            fp, tn = fp + bool(found), tn + (not found)
        for category in categories:
            labelled, flagged = category in item["categories"], category in found
            per_category[category][0] += labelled and flagged
            per_category[category][1] += labelled
            per_category[category][2] += flagged
    return {
        "precision": _ratio(tp, tp + fp),
        "recall": _ratio(tp, tp + fn),
        "fpr": _ratio(fp, fp + tn),
        "recall_by_category": {c: _ratio(v[0], v[1]) for c, v in per_category.items()},
        "precision_by_category": {c: _ratio(v[0], v[2]) for c, v in per_category.items()},
    }


def measure(root: str | None = None) -> dict[str, Any]:
    from bench.guardrail_sets import public_moderation as data

    out: dict[str, Any] = {"sets": {}}
    for source in data.TEST_SOURCES:
        items = data.load(root, (source,))
        runs = {"rules": _rules_flags(items), "model": _model_flags(items)}
        runs["both"] = [a | b for a, b in zip(runs["rules"], runs["model"], strict=True)]
        out["sets"][source] = {
            "repo": data.SNAPSHOTS[source].repo,
            "commit": data.SNAPSHOTS[source].commit,
            "licence": data.SNAPSHOTS[source].licence,
            "items": len(items),
            "harmful": sum(bool(i["categories"]) for i in items),
            "counts": data.counts(items)[source],
            **{engine: _scores(items, flags, data.CATEGORIES) for engine, flags in runs.items()},
        }
    openai = data.load(root, ("openai",))
    out["latency"] = latency([i["text"] for i in openai[::20]])
    return out


def latency(texts: list[str]) -> dict[str, Any]:
    """p50 ms per message, one at a time: the MiniLM embedding, the head after it, and the lexicon."""
    import numpy as np

    from memproc.guardrails import _moderation_lexicon, _moderation_model

    head = _moderation_model._load()
    embedder = head["embedder"]
    embedder.embed(["warm up"])
    lexicon = _moderation_lexicon.compile_lexicon(None)
    embed_ms, head_ms, lexicon_ms = [], [], []
    for text in texts:
        start = time.perf_counter()
        vector = np.asarray(embedder.embed([text])[0], dtype=np.float32)
        middle = time.perf_counter()
        row = vector @ head["coef"].T + head["intercept"]
        _moderation_model.to_scores(dict(zip(head["categories"], row.tolist(), strict=True)), 0.5)
        end = time.perf_counter()
        _moderation_lexicon.score(text, lexicon)
        lexicon_end = time.perf_counter()
        embed_ms.append((middle - start) * 1000)
        head_ms.append((end - middle) * 1000)
        lexicon_ms.append((lexicon_end - end) * 1000)
    return {
        "texts": len(texts),
        "embedding_p50_ms": round(statistics.median(embed_ms), 2),
        "head_p50_ms": round(statistics.median(head_ms), 4),
        "lexicon_p50_ms": round(statistics.median(lexicon_ms), 3),
    }


def _fmt(value: Any) -> str:
    return "–" if value is None else f"{value:.2f}"


def markdown(result: dict[str, Any]) -> str:
    if "skipped" in result:
        return f"Moderation across sources: skipped ({result['skipped']})"
    lines = [
        "ModerationProcessor on public sets it was never trained on (default threshold 0.5; "
        "flagged = any category at or above it):",
        "",
        "| set | items (harmful) | engine | precision | recall | FPR | recall hate / harassment / "
        "self-harm / sexual / violence |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in result["sets"].values():
        name = f"{row['repo']} @ {row['commit'][:7]} ({row['licence']})"
        for engine in ("rules", "model", "both"):
            scores = row[engine]
            per = " / ".join(_fmt(v) for v in scores["recall_by_category"].values())
            lines.append(
                f"| {name} | {row['items']:,} ({row['harmful']:,}) | {engine} | "
                f"{_fmt(scores['precision'])} | {_fmt(scores['recall'])} | {_fmt(scores['fpr'])} | {per} |"
            )
    lat = result["latency"]
    lines += [
        "",
        f"Learned moderation head, p50 per message over {lat['texts']} texts one at a time: MiniLM "
        f"embedding {lat['embedding_p50_ms']} ms, the head after it {lat['head_p50_ms']} ms (lexicon "
        f"{lat['lexicon_p50_ms']} ms).",
    ]
    return "\n".join(lines)
