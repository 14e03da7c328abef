"""Vector stores for the tests that must tell one store from another: rows kept in memory, not in
`MessageEmbedding`, so a row written to the settings' store instead shows up as missing here."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from memproc.models import public_message_id
from memproc.processors.store import VectorHit
from memproc.vectors import EmbeddingRow


class InMemoryStore:
    """A complete `VectorStore` over a dict; `deferred` counts `deferred_index` blocks."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str, int], EmbeddingRow] = {}
        self.deferred: list[tuple[str, int]] = []

    def store(self, rows: Sequence[EmbeddingRow]) -> None:
        for row in rows:
            self.rows.setdefault((row.message_id, row.model, row.chunk), row)

    def deferred_index(self, embedder_id: str, dimensions: int) -> Any:
        from contextlib import nullcontext

        self.deferred.append((embedder_id, dimensions))
        return nullcontext()

    def search(
        self,
        *,
        embedder_id: str,
        vector: Sequence[float] | np.ndarray,
        top_k: int,
        thread_id: str | None = None,
        resource_id: str | None = None,
        threshold: float | None = None,
    ) -> list[VectorHit]:
        query = np.asarray(vector, dtype=np.float32)
        query = query / np.linalg.norm(query)
        best: dict[str, VectorHit] = {}
        for row in self.rows.values():
            if row.model != embedder_id or (thread_id and row.thread_id != thread_id):
                continue
            if resource_id and row.resource_id != resource_id:
                continue
            stored = np.asarray(row.vector, dtype=np.float32)
            score = float(stored @ query / np.linalg.norm(stored))
            if threshold is not None and score < threshold:
                continue
            if row.message_id not in best or best[row.message_id].score < score:
                best[row.message_id] = VectorHit(row.message_id, row.thread_id, score)
        return sorted(best.values(), key=lambda hit: -hit.score)[:top_k]

    def message_ids(self) -> set[str]:
        """The ids (as callers know them) of the messages it holds vectors of; rows carry keys."""
        return {public_message_id(message_id) for message_id, _, _ in self.rows}


class SharedStore(InMemoryStore):
    """Reachable by dotted path (`tests.vectors.stores.SharedStore`): every instance, including one a
    worker builds from the path, shares the class's rows."""

    shared_rows: ClassVar[dict[tuple[str, str, int], EmbeddingRow]] = {}
    shared_deferred: ClassVar[list[tuple[str, int]]] = []

    def __init__(self) -> None:
        self.rows = type(self).shared_rows
        self.deferred = type(self).shared_deferred

    @classmethod
    def reset(cls) -> None:
        cls.shared_rows.clear()
        cls.shared_deferred.clear()
