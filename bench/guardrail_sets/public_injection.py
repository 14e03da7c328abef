"""Public, labelled prompt-injection and benign texts, read from pinned snapshots of public GitHub
repositories (nothing of them is committed here; memproc/guardrails/models/SOURCES.md lists each
source, commit, licence and count).

The training script (scripts/train_injection_model.py) and the cross-source measurement of
bench/guardrails.py both read them through `load()`. A snapshot is looked up as
`<root>/<owner>+<name>/repo` (a bare git directory, as the project's fetch tool leaves it) or
`<root>/<owner>/<name>` (a plain `git clone`); the file is read at the pinned commit with
`git show`, so a newer checkout of the repository still gives the same items. `root` defaults to
$MEMPROC_PUBLIC_DATA, else /work/.mirror.

Never read here, whatever their licence: the sets kept for independent evaluation (deepset's
prompt-injections, verazuo's jailbreak_llms, PIGuard's NotInject and WildGuard copies, OpenAI's
moderation-api-release, presidio-research's synthetic set, awesome-chatgpt-prompts), nor sources that
copy them (jailbreakchat templates, such as JailbreakBench's JBC artifacts).

Each item: {"text", "label" (1 attack, 0 benign), "source", "lang", "kind"}.
"""

from __future__ import annotations

import csv
import io
import json
import os
import random
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SEED = 3607


@dataclass(frozen=True)
class Snapshot:
    repo: str
    commit: str
    licence: str


SNAPSHOTS = {
    "tensortrust": Snapshot(
        "HumanCompatibleAI/tensor-trust-data", "e2385ea9cf448c9641b96e2e39f113ed4979a5b0", "none stated"
    ),
    "xsafety": Snapshot(
        "Jarviswang94/Multilingual_safety_benchmark", "8c55b6a6cda594cd550a4921513238a2dd40eb5a", "Apache-2.0"
    ),
    "jbb": Snapshot("JailbreakBench/artifacts", "909e68c01d94222b8ad2e397a017e2e12e2adb73", "MIT"),
    "clinc": Snapshot("clinc/oos-eval", "828f8093932c8fe6ca7936c3d2e52903b1c523de", "CC-BY-3.0"),
    "xquad": Snapshot("google-deepmind/xquad", "7d30520c717524000f0d9d2f9c10a069acd9d285", "CC-BY-SA-4.0"),
    "bipia": Snapshot("microsoft/BIPIA", "1a2a91da6bb12838e05d1b2e54d98e2f37b835f3", "MIT"),
    "selfinstruct": Snapshot(
        "yizhongw/self-instruct", "0b26ccaa415992100fa32df62d41b994cf928e23", "Apache-2.0"
    ),
    "mtbench": Snapshot("lm-sys/FastChat", "0e6d3e4beaab66f4d3f93db72541a4abab8af28d", "Apache-2.0"),
    "mgsm": Snapshot("google-research/url-nlp", "452a21ad3dae5668c06ceeac21ff073e1e40f9be", "CC-BY-4.0"),
}

# What each source gives (label: 1 attack, 0 benign); "held out" in the cross-source table means
# all items of that source, both labels.
SOURCES = tuple(SNAPSHOTS)
XSAFETY_LANGS = {"en": "_n", "de": "", "fr": "", "es": ""}  # file suffix; Spanish lives in sp/
XQUAD_LANGS = ("en", "de", "es", "ro")
MGSM_LANGS = ("en", "de", "fr", "es")
CLINC_SAMPLE = 2500
XQUAD_SAMPLE = 600


class MissingSnapshot(LookupError):
    pass


def default_root() -> Path:
    return Path(os.environ.get("MEMPROC_PUBLIC_DATA", "/work/.mirror"))


def _git_dir(root: Path, repo: str) -> Path:
    owner, name = repo.split("/")
    for candidate in (root / f"{owner}+{name}" / "repo", root / owner / name):
        if candidate.exists():
            return candidate
    raise MissingSnapshot(
        f"no snapshot of {repo} under {root}: clone https://github.com/{repo} to {root / owner / name} "
        "(or set MEMPROC_PUBLIC_DATA)"
    )


def _read(root: Path, source: str, path: str) -> str:
    snap = SNAPSHOTS[source]
    out = subprocess.run(
        ["git", "-C", str(_git_dir(root, snap.repo)), "show", f"{snap.commit}:{path}"],
        capture_output=True,
        check=True,
    )
    return out.stdout.decode("utf-8")


def _item(text: str, label: int, source: str, lang: str, kind: str) -> dict[str, Any]:
    return {"text": text.strip(), "label": label, "source": source, "lang": lang, "kind": kind}


def _tensortrust(root: Path) -> list[dict[str, Any]]:
    """Human-written attacks of the Tensor Trust game (hijacking and prompt extraction)."""
    items = []
    for kind, path in (
        ("hijacking", "benchmarks/hijacking-robustness/v1/hijacking_robustness_dataset.jsonl"),
        ("extraction", "benchmarks/extraction-robustness/v1/extraction_robustness_dataset.jsonl"),
    ):
        for line in _read(root, "tensortrust", path).splitlines():
            if line.strip():
                items.append(_item(json.loads(line)["attack"], 1, "tensortrust", "en", kind))
    return items


def _csv_rows(text: str) -> list[str]:
    rows = csv.reader(io.StringIO(text.lstrip("\ufeff")))
    return [r[0].strip() for r in rows if r and r[0].strip()]


def _xsafety(root: Path) -> list[dict[str, Any]]:
    """XSafety: goal-hijacking prompts (attacks) and commonsense safety questions (benign), in four
    of its languages. The translations are machine-made and some drop the hijack (label noise)."""
    items = []
    for lang, suffix in XSAFETY_LANGS.items():
        folder = "sp" if lang == "es" else lang
        for row in _csv_rows(_read(root, "xsafety", f"{folder}/Goal_Hijacking{suffix}.csv")):
            items.append(_item(row, 1, "xsafety", lang, "goal-hijacking"))
        for row in _csv_rows(_read(root, "xsafety", f"{folder}/commonsense.csv")):
            items.append(_item(row, 0, "xsafety", lang, "commonsense"))
    return items


def _jbb(root: Path) -> list[dict[str, Any]]:
    """JailbreakBench artifacts: PAIR's role-play jailbreaks and the adaptive random-search template
    (its 100 copies differ only in the goal: one per template prefix is kept)."""
    items, seen_prefix = [], set()
    for method, folder in (("PAIR", "black_box"), ("prompt_with_random_search", "black_box")):
        for model in ("gpt-3.5-turbo-1106", "gpt-4-0125-preview", "llama-2-7b-chat-hf", "vicuna-13b-v1.5"):
            data = json.loads(_read(root, "jbb", f"attack-artifacts/{method}/{folder}/{model}.json"))
            for jailbreak in data["jailbreaks"]:
                prompt = jailbreak.get("prompt")
                if not prompt:
                    continue
                if method != "PAIR":
                    if prompt[:300] in seen_prefix:
                        continue
                    seen_prefix.add(prompt[:300])
                items.append(_item(prompt, 1, "jbb", "en", method.lower()))
    return items


def _clinc(root: Path) -> list[dict[str, Any]]:
    """CLINC150: crowd-written requests to a task assistant (in-scope and out-of-scope), a sample."""
    data = json.loads(_read(root, "clinc", "data/data_full.json"))
    texts = sorted({t for split in data.values() for t, _ in split})
    random.Random(SEED).shuffle(texts)
    return [_item(t, 0, "clinc", "en", "request") for t in texts[:CLINC_SAMPLE]]


def _xquad(root: Path) -> list[dict[str, Any]]:
    """XQuAD: the same reading-comprehension questions, professionally translated; a sample a language."""
    items = []
    for lang in XQUAD_LANGS:
        data = json.loads(_read(root, "xquad", f"xquad.{lang}.json"))
        questions = sorted(
            {
                qa["question"]
                for article in data["data"]
                for paragraph in article["paragraphs"]
                for qa in paragraph["qas"]
            }
        )
        random.Random(SEED).shuffle(questions)
        items += [_item(q, 0, "xquad", lang, "question") for q in questions[:XQUAD_SAMPLE]]
    return items


def _bipia(root: Path) -> list[dict[str, Any]]:
    """BIPIA's clean external contents (e-mails, tables, code-error reports), as tools return them,
    without the attacks the benchmark inserts."""
    items = []
    for kind, path in (
        ("email", "benchmark/email/train.jsonl"),
        ("email", "benchmark/email/test.jsonl"),
        ("table", "benchmark/table/test.jsonl"),
        ("code", "benchmark/code/train.jsonl"),
        ("code", "benchmark/code/test.jsonl"),
    ):
        for line in _read(root, "bipia", path).splitlines():
            if not line.strip():
                continue
            row = json.loads(line)
            context = _joined(row.get("context"))
            if kind == "code":
                context = f"{_joined(row.get('error'))}\n{context}"
            if context and context.strip():
                items.append(_item(context[:2000], 0, "bipia", "en", kind))
    return items


def _selfinstruct(root: Path) -> list[dict[str, Any]]:
    """Self-Instruct's human-written seed tasks and user-oriented instructions (each with its first
    input, as a user would paste it): ordinary instructions, many of them rewriting or ignoring
    something."""
    items = []
    for kind, path in (
        ("seed", "data/seed_tasks.jsonl"),
        ("user-oriented", "human_eval/user_oriented_instructions.jsonl"),
    ):
        for line in _read(root, "selfinstruct", path).splitlines():
            if not line.strip():
                continue
            row = json.loads(line)
            instances = row.get("instances") or [{}]
            first = (instances[0].get("input") or "").strip()
            text = f"{row['instruction']}\n{first}" if first else row["instruction"]
            items.append(_item(text, 0, "selfinstruct", "en", kind))
    return items


def _mtbench(root: Path) -> list[dict[str, Any]]:
    """MT-bench's and Vicuna-bench's questions (every turn): writing, role-play ("pretend yourself to
    be ..."), reasoning, coding; follow-ups such as "Rewrite your previous response"."""
    items = []
    for bench in ("mt_bench", "vicuna_bench"):
        path = f"fastchat/llm_judge/data/{bench}/question.jsonl"
        for line in _read(root, "mtbench", path).splitlines():
            if line.strip():
                row = json.loads(line)
                items += [_item(turn, 0, "mtbench", "en", row["category"]) for turn in row["turns"]]
    return items


def _mgsm(root: Path) -> list[dict[str, Any]]:
    """MGSM: grade-school maths word problems, human-translated."""
    items = []
    for lang in MGSM_LANGS:
        for row in csv.reader(io.StringIO(_read(root, "mgsm", f"mgsm/mgsm_{lang}.tsv")), delimiter="\t"):
            if row and row[0].strip():
                items.append(_item(row[0], 0, "mgsm", lang, "maths"))
    return items


def _joined(value: Any) -> str:
    if isinstance(value, list):
        return "\n".join(str(v) for v in value)
    return str(value or "")


LOADERS = {
    "tensortrust": _tensortrust,
    "xsafety": _xsafety,
    "jbb": _jbb,
    "clinc": _clinc,
    "xquad": _xquad,
    "bipia": _bipia,
    "selfinstruct": _selfinstruct,
    "mtbench": _mtbench,
    "mgsm": _mgsm,
}


def load(root: str | Path | None = None, sources: tuple[str, ...] = SOURCES) -> list[dict[str, Any]]:
    """Every item of the given sources, in a fixed order; a text that occurs twice is kept once
    (its first occurrence), and texts shorter than 3 characters are dropped."""
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
    out: dict[str, dict[str, int]] = {}
    for item in items:
        key = f"{item['source']}/{item['lang']}"
        row = out.setdefault(key, {"attack": 0, "benign": 0})
        row["attack" if item["label"] else "benign"] += 1
    return dict(sorted(out.items()))


# --- the learned head: fitting and its operating point (scripts/train_injection_model.py, bench) ----

TARGET_FPR = 0.02


def embed(items: list[dict[str, Any]]) -> Any:
    """MiniLM sentence embeddings of the items' texts (what the detector computes at run time)."""
    import numpy as np

    from memproc.embedders.minilm import MiniLMEmbedder

    return np.asarray(MiniLMEmbedder().embed([i["text"] for i in items]), dtype=np.float32)


def fit_head(features: Any, labels: Any) -> tuple[Any, float]:
    """Logistic regression (L2, C=1, classes balanced; lbfgs is deterministic): (coef, intercept)."""
    import numpy as np
    from sklearn.linear_model import LogisticRegression

    model = LogisticRegression(C=1.0, class_weight="balanced", max_iter=2000)
    model.fit(features, labels)
    return model.coef_[0].astype(np.float32), float(np.float32(model.intercept_[0]))


def logits(features: Any, coef: Any, intercept: float) -> Any:
    return features @ coef + intercept


def out_of_source_logits(features: Any, labels: Any, sources: Any) -> Any:
    """Each item's logit from a head fitted without its source (leave one source out)."""
    import numpy as np

    out = np.zeros(len(labels), dtype=np.float64)
    for source in sorted(set(sources.tolist())):
        held = sources == source
        coef, intercept = fit_head(features[~held], labels[~held])
        out[held] = logits(features[held], coef, intercept)
    return out


def operating_logit(benign_logits: Any, fpr: float = TARGET_FPR) -> float:
    """The smallest logit that flags at most `fpr` of the given benign items."""
    import numpy as np

    ranked = np.sort(np.asarray(benign_logits, dtype=np.float64))
    index = min(len(ranked) - 1, int(np.ceil((1 - fpr) * len(ranked))))
    return float(np.float32(np.nextafter(ranked[index - 1], np.inf) if index > 0 else ranked[0]))
