"""Labelled sets that someone else wrote, read at run time from a local copy (never committed here).

`pii_external_items(path)` reads Nannigalaxy/PII-synthetic_dataset (`dataset/pii_syn_nano_en.json`,
MIT licence): 149 English sentences about data breaches written by a language model, each with the
values it holds and their labels ("EMAIL", "PASSWORD", "SSN", "PHONE", ...), 18 without personal data.
Nobody in this project wrote or tuned on it. Get it with

    git clone https://github.com/Nannigalaxy/PII-synthetic_dataset
    MEMPROC_BENCH_PII_SET=PII-synthetic_dataset/dataset/pii_syn_nano_en.json python bench/guardrails.py

The labels give values, not offsets, and some are not usable as gold: a value that is not in the
sentence ("None", "CH29309..."), or is masked there ("XXX-XX-2409", "4532************7890"). Those are
dropped and counted; surrounding quotes and asterisks (Markdown emphasis) are stripped from a value
first. Each kept value is placed at its first unused occurrence in the sentence.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

SOURCE = {
    "name": "Nannigalaxy/PII-synthetic_dataset",
    "url": "https://github.com/Nannigalaxy/PII-synthetic_dataset",
    "file": "dataset/pii_syn_nano_en.json",
    "commit": "e776265d92426ab9ef11f7bea3b9989addc39b63",
    "licence": "MIT",
}
# Their labels of the types PIIDetector claims; the other labels (PERSON, PASSPORT, TAX_ID, ...)
# are out of scope for the rules and ignored.
LABELS = {
    "EMAIL": "email",
    "PHONE": "phone",
    "CREDIT_CARD": "credit_card",
    "IBAN": "iban",
    "SSN": "us_ssn",
    "PASSWORD": "secret",
}
# With PIIDetector(engine="presidio") (MEMPROC_BENCH_PRESIDIO_MODEL), their person labels are scored too.
PRESIDIO_LABELS = {**LABELS, "PERSON": "name"}
_MASKED = re.compile(r"[X*]{3,}|\.\.\.|^(?:none|null)$", re.I)


def pii_external_items(
    path: str | Path, labels: dict[str, str] = LABELS
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(items shaped like `pii_items`' ones, provenance and counts), gold for the `labels` given."""
    raw = Path(path).read_bytes()
    records = json.loads(raw)
    items: list[dict[str, Any]] = []
    dropped: dict[str, int] = {}
    kept: dict[str, int] = {}
    for index, record in enumerate(records):
        text = record["text"]
        spans: list[list[Any]] = []
        for entity in record.get("NER", []):
            kind = labels.get(entity.get("label", ""))
            if kind is None:
                continue
            value = str(entity.get("entity", "")).strip().strip("'\"*").strip()
            start = _unused(text, value, spans)
            if not value or _MASKED.search(value) or start is None:
                dropped[kind] = dropped.get(kind, 0) + 1
                continue
            spans.append([start, start + len(value), kind])
            kept[kind] = kept.get(kind, 0) + 1
        items.append(
            {
                "id": f"nano-{index}",
                "text": text,
                "spans": sorted(spans),
                "variant": "external",
                "locale": "en",
                "negative": not record.get("has_pii", True),
            }
        )
    info = {
        **SOURCE,
        "sha256": hashlib.sha256(raw).hexdigest(),
        "records": len(records),
        "without_pii": sum(1 for r in records if not r.get("has_pii", True)),
        "gold_kept": kept,
        "gold_dropped": dropped,
    }
    return items, info


def _unused(text: str, value: str, spans: list[list[Any]]) -> int | None:
    start = text.find(value) if value else -1
    while start >= 0:
        if all(start >= e or start + len(value) <= s for s, e, _ in spans):
            return start
        start = text.find(value, start + 1)
    return None
