"""The learned scorer of ModerationProcessor(engine="model" | "both"): one logistic regression per
category over MiniLM sentence embeddings (memproc.embedders.minilm), shipped as plain weights in
models/moderation_head.npz (scripts/train_moderation_model.py made it; models/SOURCES.md says from
what, and its sha256).

Like the prompt-injection head (_injection_model) it needs the `embeddings` extra:
`check_available()` raises ConfigurationError when it is missing, so a processor built with
engine="model" or "both" fails at start-up, never at request time. At request time an embedding error
is logged and the text is scored by the lexicon alone (with engine="model" too: an outage must not
let everything through).
"""

from __future__ import annotations

import math
import threading
from pathlib import Path
from typing import Any

from memproc.guardrails import _injection_model

MODEL_FILE = Path(__file__).with_name("models") / "moderation_head.npz"
# Texts longer than MiniLM's window are cut at 256 tokens (about 1,000 characters of English): what
# comes after is the lexicon's to find.
MAX_TOKENS = 256

_lock = threading.Lock()
_head: dict[str, Any] = {}  # the package's weights, read once: not a cache of data


def check_available() -> None:
    """Raises ConfigurationError unless the learned scorer can run here (nothing is loaded)."""
    _injection_model.check_available("ModerationProcessor", MODEL_FILE)


def _load() -> dict[str, Any]:
    with _lock:
        if not _head:
            import numpy as np

            from memproc.embedders.minilm import MiniLMEmbedder

            with np.load(MODEL_FILE) as data:
                _head["categories"] = tuple(str(c) for c in data["categories"])
                _head["coef"] = data["coef"].astype(np.float32)
                _head["intercept"] = data["intercept"].astype(np.float32)
                _head["threshold_logit"] = data["threshold_logit"].astype(np.float64)
            _head["embedder"] = MiniLMEmbedder(max_length=MAX_TOKENS)
    return _head


def categories() -> tuple[str, ...]:
    """The categories the shipped head scores, in its order."""
    return _load()["categories"]


def raw_logits(texts: list[str]) -> list[dict[str, float]]:
    """Per text, each category's logit (what the training script fits)."""
    import numpy as np

    head = _load()
    vectors = np.asarray(head["embedder"].embed(texts), dtype=np.float32)
    rows = (vectors @ head["coef"].T + head["intercept"]).astype(float)
    return [dict(zip(head["categories"], row.tolist(), strict=True)) for row in rows]


def to_scores(logits: dict[str, float], threshold: float) -> dict[str, float]:
    """0-1 scores that reach `threshold` exactly where a category's logit reaches its operating point
    (at most 1% of benign texts from sources its head was not fitted on flagged), so one threshold
    serves the lexicon and the head."""
    head = _load()
    shift = math.log(threshold / (1 - threshold)) if 0 < threshold < 1 else 0.0
    out = {}
    for category, limit in zip(head["categories"], head["threshold_logit"].tolist(), strict=True):
        value = logits[category] - limit + shift
        out[category] = round(1 / (1 + math.exp(-max(-60.0, min(60.0, value)))), 4)
    return out


def learned_scores(text: str, threshold: float) -> dict[str, float]:
    """The head's score per category for `text`. Raises what the embedder raises (the caller logs it
    and falls back)."""
    (logits,) = raw_logits([text])
    return to_scores(logits, threshold)
