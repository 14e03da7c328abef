"""Public, labelled moderation texts (hate, harassment, self-harm, sexual, violence, and benign),
read from pinned snapshots of public GitHub repositories; nothing of them is committed here.
memproc/guardrails/models/SOURCES.md lists each source, commit, licence and count.

Two kinds of source:
- TRAIN_SOURCES: what scripts/train_moderation_model.py fits the shipped head on (and what the
  leave-one-source-out rows of bench/guardrails.py rotate through);
- TEST_SOURCES: read by bench/guardrails.py only, never trained on: OpenAI's moderation-api-release
  (reserved for independent evaluation) and SimpleSafetyTests.

Snapshots are found as in public_injection (`<root>/<owner>+<name>/repo` or `<root>/<owner>/<name>`,
read at the pinned commit with `git show`; root $MEMPROC_PUBLIC_DATA, else /work/.mirror).

Each item: {"text", "categories" (a tuple of memproc's moderation categories; empty: benign),
"source", "kind"}.
"""

from __future__ import annotations

import csv
import gzip
import html
import io
import json
import random
import re
import subprocess
from pathlib import Path
from typing import Any

from bench.guardrail_sets.public_injection import MissingSnapshot, Snapshot, _git_dir, default_root

__all__ = ["MissingSnapshot", "load", "counts", "TRAIN_SOURCES", "TEST_SOURCES", "CATEGORIES"]

SEED = 3607
CATEGORIES = ("hate", "harassment", "self-harm", "sexual", "violence")

SNAPSHOTS = {
    "davidson": Snapshot(
        "t-davidson/hate-speech-and-offensive-language", "cb50f7e9eb855a99abc51423bf40df0e26d6fe30", "MIT"
    ),
    "toxigen": Snapshot("microsoft/TOXIGEN", "01517e814639e0334c920a3c502036c8158aac87", "MIT"),
    "hatecheck": Snapshot(
        "paul-rottger/hatecheck-data", "d84302298ceeb34f4b0dde2d8a1f4932c2caa612", "CC-BY-4.0"
    ),
    "convabuse": Snapshot("amandacurry/convabuse", "c0a9469f48956e868276c605d499010ea3c7c0d0", "CC-BY-4.0"),
    "xsafety": Snapshot(
        "Jarviswang94/Multilingual_safety_benchmark", "8c55b6a6cda594cd550a4921513238a2dd40eb5a", "Apache-2.0"
    ),
    "sdcnl": Snapshot("ayaanzhaque/SDCNL", "ddf995aabd028657385cac6cee92c5d53774992d", "none stated"),
    "clinc": Snapshot("clinc/oos-eval", "828f8093932c8fe6ca7936c3d2e52903b1c523de", "CC-BY-3.0"),
    # test only, never trained on
    "openai": Snapshot("openai/moderation-api-release", "f4ab51b5edd3bfbcb349a56324274235b674e0e4", "MIT"),
    "sst": Snapshot("bertiev/SimpleSafetyTests", "d7aee9a9422a5a5488f478fd79c2479c891c0f3b", "CC-BY-4.0"),
}
TRAIN_SOURCES = ("davidson", "toxigen", "hatecheck", "convabuse", "xsafety", "sdcnl", "clinc")
TEST_SOURCES = ("openai", "sst")

DAVIDSON_BENIGN_SAMPLE = 1500
HATECHECK_HATEFUL_SAMPLE = 1200
CLINC_SAMPLE = 2500
TEXT_LIMIT = 1000  # characters; MiniLM reads 256 tokens anyway
# OpenAI's labels: S sexual, S3 sexual/minors, H hate, H2 hate/threatening, V violence,
# V2 violence/graphic, HR harassment, SH self-harm.
OPENAI_LABELS = {
    "S": "sexual",
    "S3": "sexual",
    "H": "hate",
    "H2": "hate",
    "V": "violence",
    "V2": "violence",
    "HR": "harassment",
    "SH": "self-harm",
}
# SimpleSafetyTests' harm areas that match a moderation category (its scams and illegal items
# match none and are left out).
SST_AREAS = {
    "Suicide, Self-Harm, and Eating Disorders": "self-harm",
    "Physical harm and Violence": "violence",
    "Child safety": "sexual",
}


def _read_bytes(root: Path, source: str, path: str) -> bytes:
    snap = SNAPSHOTS[source]
    out = subprocess.run(
        ["git", "-C", str(_git_dir(root, snap.repo)), "show", f"{snap.commit}:{path}"],
        capture_output=True,
        check=True,
    )
    return out.stdout


def _read(root: Path, source: str, path: str) -> str:
    return _read_bytes(root, source, path).decode("utf-8")


def _csv(text: str) -> list[dict[str, str]]:
    csv.field_size_limit(10**8)
    return list(csv.DictReader(io.StringIO(text.lstrip("\ufeff"))))


def _item(text: str, categories: tuple[str, ...], source: str, kind: str) -> dict[str, Any]:
    return {"text": text.strip()[:TEXT_LIMIT], "categories": categories, "source": source, "kind": kind}


_TWEET_NOISE = re.compile(r"(?:\bRT\s+)?@\w+:?|https?://\S+")


def _tweet(text: str) -> str:
    return " ".join(_TWEET_NOISE.sub(" ", html.unescape(text)).split())


def _davidson(root: Path) -> list[dict[str, Any]]:
    """Tweets, crowd-labelled by majority: hate speech (hate) and neither (benign, a sample); the
    "offensive but not hate" class is left out (mostly casual profanity no moderation category names)."""
    rows = _csv(_read(root, "davidson", "data/labeled_data.csv"))
    hate = [_tweet(r["tweet"]) for r in rows if r["class"] == "0"]
    neither = sorted({_tweet(r["tweet"]) for r in rows if r["class"] == "2"})
    random.Random(SEED).shuffle(neither)
    return [_item(t, ("hate",), "davidson", "hate-speech") for t in hate] + [
        _item(t, (), "davidson", "neither") for t in neither[:DAVIDSON_BENIGN_SAMPLE]
    ]


def _toxigen(root: Path) -> list[dict[str, Any]]:
    """ToxiGen's human-written demonstration statements about 13 groups (the sentences its prompt
    files are made of), hateful and neutral: hate, and benign texts that name the same groups."""
    items = []
    groups = (
        "asian black chinese immigrant jewish latino lgbtq mental_disability mexican middle_east "
        "muslim native_american physical_disability women bisexual trans"
    ).split()
    for kind, categories in (("hate", ("hate",)), ("neutral", ())):
        for group in groups:
            path = f"prompts/{kind}_{group}_1k.txt"
            try:
                text = _read(root, "toxigen", path)
            except subprocess.CalledProcessError:
                continue  # not every group has both files
            sentences = sorted(
                {
                    s.strip().lstrip("-").strip()
                    for line in text.splitlines()
                    for s in line.split("\\n")
                    if s.strip().lstrip("-").strip()
                }
            )
            items += [_item(s, categories, "toxigen", f"{kind}-{group}") for s in sentences]
    return items


def _hatecheck(root: Path) -> list[dict[str, Any]]:
    """HateCheck's functional test cases: hateful ones (a sample; threats are also violence) and every
    non-hateful contrast (counter-speech, quotes, negations, reclaimed slurs, neutral mentions)."""
    rows = _csv(_read(root, "hatecheck", "test_suite_cases.csv"))
    hateful = [r for r in rows if r["label_gold"] == "hateful"]
    random.Random(SEED).shuffle(hateful)
    items = []
    for r in hateful[:HATECHECK_HATEFUL_SAMPLE]:
        categories = ("hate", "violence") if r["functionality"].startswith("threat_") else ("hate",)
        items.append(_item(r["test_case"], categories, "hatecheck", r["functionality"]))
    items += [
        _item(r["test_case"], (), "hatecheck", r["functionality"])
        for r in rows
        if r["label_gold"] == "non-hateful"
    ]
    return items


_CONVABUSE_HATE = ("racist", "homophobic", "transphobic", "ableist")


def _convabuse(root: Path) -> list[dict[str, Any]]:
    """ConvAbuse: what users typed to two conversational agents, labelled by several annotators. A
    majority calling it abusive: harassment, plus sexual where most of them marked sexual harassment
    and hate where most marked a group (racist, homophobic, transphobic, ableist); a majority calling
    it not abusive: benign; the rest is left out."""
    items = []
    for split in ("train", "valid", "test"):
        for row in _csv(_read(root, "convabuse", f"2_splits/ConvAbuseEMNLP{split}.csv")):
            annotators = [i for i in range(1, 9) if row.get(f"Annotator{i}_is_abuse.1") not in (None, "")]
            abusive = [
                i for i in annotators if any(row[f"Annotator{i}_is_abuse.-{k}"] == "1" for k in (1, 2, 3))
            ]
            fine = [i for i in annotators if row[f"Annotator{i}_is_abuse.1"] == "1"]
            text = row["user"]
            if 2 * len(abusive) > len(annotators):

                def most(kind: str, abusive: list[int] = abusive, row: dict[str, str] = row) -> bool:
                    return 2 * sum(row.get(f"Annotator{i}_{kind}") == "1" for i in abusive) >= len(abusive)

                categories = ["harassment"]
                if most("sex_harassment"):
                    categories.append("sexual")
                if any(most(kind) for kind in _CONVABUSE_HATE):
                    categories.append("hate")
                items.append(_item(text, tuple(categories), "convabuse", "abusive"))
            elif 2 * len(fine) > len(annotators):
                items.append(_item(text, (), "convabuse", "not-abusive"))
    return items


def _xsafety(root: Path) -> list[dict[str, Any]]:
    """XSafety (English): its Insult prompts (harassment) and commonsense questions (benign)."""
    items = []
    for name, categories in (("Insult_n", ("harassment",)), ("commonsense", ())):
        rows = csv.reader(io.StringIO(_read(root, "xsafety", f"en/{name}.csv").lstrip("\ufeff")))
        for row in rows:
            if row and row[0].strip():
                items.append(_item(row[0], categories, "xsafety", name.removesuffix("_n").lower()))
    return items


def _sdcnl(root: Path) -> list[dict[str, Any]]:
    """SDCNL: Reddit posts, title and text: r/SuicideWatch's as self-harm, r/depression's as benign.
    The latter are distress, often with dark thoughts (label noise), but without them the only long
    first-person texts the head saw were self-harm, and it took any such text for self-harm."""
    rows = _csv(_read(root, "sdcnl", "data/combined-set.csv"))
    return [
        _item(
            f"{r['title'].strip()}\n{r['selftext'].strip()}",
            ("self-harm",) if r["is_suicide"] == "1" else (),
            "sdcnl",
            "suicidewatch" if r["is_suicide"] == "1" else "depression",
        )
        for r in rows
    ]


def _clinc(root: Path) -> list[dict[str, Any]]:
    """CLINC150: crowd-written requests to a task assistant, a sample (benign)."""
    data = json.loads(_read(root, "clinc", "data/data_full.json"))
    texts = sorted({t for split in data.values() for t, _ in split})
    random.Random(SEED).shuffle(texts)
    return [_item(t, (), "clinc", "request") for t in texts[:CLINC_SAMPLE]]


def _openai(root: Path) -> list[dict[str, Any]]:
    """OpenAI's moderation-api-release (1,680 texts, each labelled per category). Test only."""
    raw = gzip.decompress(_read_bytes(root, "openai", "data/samples-1680.jsonl.gz")).decode("utf-8")
    items = []
    for line in raw.splitlines():
        if line.strip():
            row = json.loads(line)
            found = tuple(
                c for c in CATEGORIES if any(row.get(k) == 1 for k, v in OPENAI_LABELS.items() if v == c)
            )
            items.append(_item(row["prompt"], found, "openai", "labelled" if found else "clear"))
    return items


def _sst(root: Path) -> list[dict[str, Any]]:
    """SimpleSafetyTests: 100 clearly harmful prompts; the 60 in areas that match a category. Test only."""
    rows = _csv(_read(root, "sst", "SimpleSafetyTests - test cases.csv"))
    return [
        _item(r["prompts_final"], (SST_AREAS[r["harm_area"]],), "sst", r["category"])
        for r in rows
        if r["harm_area"] in SST_AREAS
    ]


LOADERS = {
    "davidson": _davidson,
    "toxigen": _toxigen,
    "hatecheck": _hatecheck,
    "convabuse": _convabuse,
    "xsafety": _xsafety,
    "sdcnl": _sdcnl,
    "clinc": _clinc,
    "openai": _openai,
    "sst": _sst,
}


def load(root: str | Path | None = None, sources: tuple[str, ...] = TRAIN_SOURCES) -> list[dict[str, Any]]:
    """Every item of the given sources, in a fixed order; a text that occurs twice (case and spacing
    folded) is kept once, its first occurrence, and texts shorter than 3 characters are dropped."""
    base = Path(root) if root else default_root()
    seen: set[str] = set()
    items = []
    for source in sources:
        for item in LOADERS[source](base):
            key = " ".join(item["text"].lower().split())
            if len(key) < 3 or key in seen:
                continue
            seen.add(key)
            items.append(item)
    return items


def counts(items: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Per source: benign items, and items per category (an item may count in two)."""
    out: dict[str, dict[str, int]] = {}
    for item in items:
        row = out.setdefault(item["source"], {"benign": 0, **{c: 0 for c in CATEGORIES}})
        if not item["categories"]:
            row["benign"] += 1
        for category in item["categories"]:
            row[category] += 1
    return out
