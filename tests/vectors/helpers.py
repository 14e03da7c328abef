"""Helpers for the vector-store tests: embedding rows, test vectors and the brute-force answer."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from memproc.models import Message, public_thread_id
from memproc.vectors import EmbeddingRow

MODEL = "test-embedder-8"
DIMS = 8


def unit(vector: Sequence[float]) -> np.ndarray:
    array = np.asarray(vector, dtype=np.float32)
    return array / np.linalg.norm(array)


def rows_for(
    messages: Sequence[Message],
    vectors: Sequence[Sequence[float]] | np.ndarray,
    *,
    model: str = MODEL,
    chunk: int = 0,
) -> list[EmbeddingRow]:
    return [
        EmbeddingRow(
            message_id=message.id,
            thread_id=public_thread_id(message.thread_id),  # embeddings hold the public id
            resource_id=message.resource_id,
            chunk=chunk,
            model=model,
            dimensions=len(vector),
            content_hash=f"hash-{message.id}-{chunk}",
            vector=np.asarray(vector, dtype=np.float32),
        )
        for message, vector in zip(messages, vectors, strict=True)
    ]


def random_vectors(count: int, *, dims: int = DIMS, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(count, dims)).astype(np.float32)


def exact_ranking(
    rows: Sequence[EmbeddingRow], query: Sequence[float], *, top_k: int, threshold: float | None = None
) -> list[tuple[str, float]]:
    """The expected answer, by brute force in float64: best chunk per message, best first."""
    q = np.asarray(query, dtype=np.float64)
    q /= np.linalg.norm(q)
    best: dict[str, float] = {}
    for row in rows:
        v = np.asarray(row.vector, dtype=np.float64)
        score = float(v @ q / np.linalg.norm(v))
        best[row.message_id] = max(score, best.get(row.message_id, -2.0))
    ranked = sorted(best.items(), key=lambda item: (-item[1], item[0]))
    if threshold is not None:
        ranked = [item for item in ranked if item[1] >= threshold]
    return ranked[:top_k]
