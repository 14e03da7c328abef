"""Embedders: turn texts into vectors for semantic recall.

An embedder is any object with `id`, `dimensions` and a batched `embed(texts)`; memproc ships a local
all-MiniLM-L6-v2 (ONNX, no download) and an OpenAI-compatible client. `get_embedder()` builds the one
named by `MEMPROC["EMBEDDER"]` once per process, because the local model costs ~300 MB to load.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from typing import Any, Protocol, runtime_checkable

from django.core.signals import setting_changed
from django.dispatch import receiver

from memproc.conf import build_from_setting, settings
from memproc.embedders.checks import embed_checked, vector_problem
from memproc.embedders.minilm import MiniLMEmbedder
from memproc.embedders.openai import OpenAIEmbedder

__all__ = [
    "Embedder",
    "MiniLMEmbedder",
    "OpenAIEmbedder",
    "chunk_text",
    "content_hash",
    "embed_checked",
    "get_embedder",
    "reset_embedders",
    "vector_problem",
]


@runtime_checkable
class Embedder(Protocol):
    """What memproc needs from an embedder; vectors should be L2-normalised."""

    id: str
    dimensions: int

    def embed(self, texts: list[str]) -> list[list[float]]:
        """One vector per text, in order; a whole batch in one call."""
        ...


# Embedder objects, not data: a client keeps its HTTP connection pool, a local model its loaded
# runtime (~1 s and ~300 MB for MiniLM), so each spec is built once per process.
_cache: dict[Any, Any] = {}
_cache_lock = threading.Lock()


def get_embedder(spec: Any = None) -> Embedder:
    """The embedder named by `spec` (default: the EMBEDDER setting), built once per spec and process.

    `spec` may be an embedder object (returned as is), a class, a dotted path or
    `{"CLASS": ..., "OPTIONS": {...}}`.
    """
    if spec is None:
        spec = settings.EMBEDDER
    if hasattr(spec, "embed") and not isinstance(spec, type):
        return spec
    key = _cache_key(spec)
    with _cache_lock:
        embedder = _cache.get(key)
        if embedder is None:
            embedder = build_from_setting(spec, setting="EMBEDDER")
            _cache[key] = embedder
    return embedder


def reset_embedders() -> None:
    """Forgets the built embedders (the MiniLM runtime itself stays loaded; see minilm.py)."""
    with _cache_lock:
        _cache.clear()


def _cache_key(spec: Any) -> Any:
    if isinstance(spec, dict):
        return json.dumps(spec, sort_keys=True, default=repr)
    return spec


@receiver(setting_changed)
def _reset_on_setting_changed(*, setting: str, **kwargs: Any) -> None:
    if setting == "MEMPROC":
        reset_embedders()


def content_hash(text: str, embedder_id: str) -> str:
    """sha256 hex of the text as embedded by one embedder, so re-embedding can skip unchanged texts."""
    return hashlib.sha256(f"{embedder_id}\x00{text}".encode()).hexdigest()


# Coarsest boundary first: paragraphs, lines, sentences, words; past that, a hard cut.
_BOUNDARIES = (
    re.compile(r"\n[ \t]*\n\s*"),
    re.compile(r"\n\s*"),
    re.compile(r"(?<=[.!?;:…])\s+"),
    re.compile(r"\s+"),
)


def chunk_text(text: str, max_chars: int) -> list[str]:
    """Splits `text` into chunks of at most `max_chars`, on the coarsest boundary that fits.

    Short texts come back whole; blank text gives no chunk (there is nothing to embed). Chunks are
    stripped, and neighbouring pieces are packed together up to the limit.
    """
    if max_chars <= 0:
        raise ValueError("chunk_text(max_chars=...) must be positive")
    text = text.strip()
    if not text:
        return []
    return _split(text, max_chars, 0)


def _split(text: str, max_chars: int, level: int) -> list[str]:
    if len(text) <= max_chars:
        return [text]
    if level == len(_BOUNDARIES):
        return [text[i : i + max_chars] for i in range(0, len(text), max_chars)]
    pieces = _pieces(text, _BOUNDARIES[level])
    if len(pieces) == 1:
        return _split(text, max_chars, level + 1)
    chunks: list[str] = []
    current = ""
    for piece in pieces:  # each piece keeps the separator that follows it
        if len(current) + len(piece.rstrip()) <= max_chars:
            current += piece
            continue
        if current.strip():
            chunks.append(current.strip())
        current = ""
        if len(piece.strip()) > max_chars:
            chunks.extend(_split(piece.strip(), max_chars, level + 1))
        else:
            current = piece
    if current.strip():
        chunks.append(current.strip())
    return chunks


def _pieces(text: str, boundary: re.Pattern[str]) -> list[str]:
    pieces, start = [], 0
    for match in boundary.finditer(text):
        if match.end() > start:
            pieces.append(text[start : match.end()])
            start = match.end()
    if start < len(text):
        pieces.append(text[start:])
    return pieces
