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


def clustered(count: int, *, dims: int = 16, seed: int = 0) -> np.ndarray:
    """Vectors around 20 random centres: an HNSW graph over them finds true neighbours."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(20, dims))
    return (centers[rng.integers(0, 20, count)] + 0.3 * rng.normal(size=(count, dims))).astype(np.float32)


def hnsw_indexes() -> dict[str, str]:
    """PostgreSQL: memproc's HNSW indexes, name -> definition."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname, indexdef FROM pg_indexes "
            "WHERE tablename = 'memproc_messageembedding' AND indexname LIKE 'memproc_emb_hnsw_%%'"
        )
        return dict(cursor.fetchall())


def explain(sql: str) -> str:
    """PostgreSQL: EXPLAIN of a search statement from `PgvectorStore.search_sql` (its SETs applied)."""
    from django.db import connection

    from memproc.vectors.pgvector_search import last_result

    settings_sql, select = sql.rsplit("; ", 1)
    with connection.cursor() as cursor:
        cursor.execute(f"{settings_sql}; EXPLAIN {select}")
        return "\n".join(row[0] for row in last_result(cursor, connection))
