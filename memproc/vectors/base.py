"""The vector-store protocol, the row type it stores, and what every Django-backed store shares."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

import numpy as np
from django.db import connections, router, transaction
from django.utils import timezone

from memproc.db import insert_rows
from memproc.embedders import vector_problem
from memproc.exceptions import ConfigurationError
from memproc.models import MessageEmbedding
from memproc.processors.store import VectorHit


@dataclass(frozen=True, slots=True)
class EmbeddingRow:
    """One chunk of one message, embedded by one embedder."""

    message_id: str
    thread_id: str
    resource_id: str
    chunk: int
    model: str  # the embedder id
    dimensions: int
    content_hash: str
    vector: Sequence[float] | np.ndarray


@runtime_checkable
class VectorStore(Protocol):
    def store(self, rows: Sequence[EmbeddingRow]) -> None:
        """Saves rows; a row already stored for (message, model, chunk) is left as it is."""
        ...

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
        """The `top_k` messages closest by cosine similarity, best first, each once (its best chunk).

        Only rows of `embedder_id` with the query's dimensions count; `thread_id` and/or
        `resource_id` narrow the scope; `threshold` is the minimum similarity.
        """
        ...


class DjangoVectorStore:
    """Stores rows in `MessageEmbedding`; subclasses implement `search`."""

    def __init__(self, *, using: str | None = None) -> None:
        if using is not None and using not in connections:
            raise ConfigurationError(f"unknown database alias {using!r}")
        self.using = using

    def db_for_read(self) -> str:
        return self.using or router.db_for_read(MessageEmbedding)

    def db_for_write(self) -> str:
        return self.using or router.db_for_write(MessageEmbedding)

    def store(self, rows: Sequence[EmbeddingRow]) -> None:
        """One INSERT (or COPY, for large batches on PostgreSQL) that skips rows already stored, so
        re-running an embedding task is harmless."""
        if not rows:
            return
        now = timezone.now()
        insert_rows(
            MessageEmbedding,
            [embedding_values(row, now) for row in rows],
            fields=EMBEDDING_COLUMNS,
            using=self.db_for_write(),
            ignore_conflicts=True,
        )

    def deferred_index(self, embedder_id: str, dimensions: int) -> AbstractContextManager[None]:
        """A block of bulk writes during which no search index is maintained row by row; the store
        brings its index up to date once at the end. Nothing to defer for stores without an index."""
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
        """Checks the arguments and normalises the query once for every back end."""
        check_search_args(top_k=top_k, threshold=threshold)
        query = query_vector(vector)
        if not query.any():
            return []  # nothing is similar to the zero vector
        return self.search_unit(
            embedder_id=embedder_id,
            query=query,
            top_k=top_k,
            thread_id=thread_id,
            resource_id=resource_id,
            threshold=threshold,
        )

    def search_unit(
        self,
        *,
        embedder_id: str,
        query: np.ndarray,
        top_k: int,
        thread_id: str | None,
        resource_id: str | None,
        threshold: float | None,
    ) -> list[VectorHit]:
        """The search proper, given a non-zero unit query vector."""
        raise NotImplementedError


EMBEDDING_COLUMNS = (
    "message",
    "thread_id",
    "resource_id",
    "chunk",
    "model",
    "dimensions",
    "content_hash",
    "vector",
    "created_at",
)


def embedding_values(row: EmbeddingRow, created_at: datetime) -> dict[str, Any]:
    """The row's column values by field name, its vector checked (`vector_problem`: its declared size,
    finite, not all zeros), so no store writes a vector that would poison searches."""
    problem = vector_problem(row.vector, row.dimensions)
    if problem is not None:
        raise ValueError(f"{row.message_id}#{row.chunk} ({row.model}): the vector is {problem}")
    vector = np.asarray(row.vector, dtype=np.float32)
    return {
        "message": row.message_id,
        "thread_id": row.thread_id,
        "resource_id": row.resource_id,
        "chunk": row.chunk,
        "model": row.model,
        "dimensions": row.dimensions,
        "content_hash": row.content_hash,
        "vector": vector,
        "created_at": created_at,
    }


def query_vector(vector: Sequence[float] | np.ndarray) -> np.ndarray:
    """The query as a unit float32 vector (cosine similarity then is a dot product)."""
    array = np.asarray(vector, dtype=np.float32)
    if array.ndim != 1 or array.size == 0:
        raise ValueError("a query vector must be a non-empty 1-D sequence")
    if not np.all(np.isfinite(array)):
        raise ValueError("a query vector must be finite")
    norm = float(np.linalg.norm(array))
    return array / norm if norm > 0 else array


def check_search_args(*, top_k: int, threshold: float | None) -> None:
    if top_k <= 0:
        raise ValueError("top_k must be positive")
    if threshold is not None and not -1.0 <= threshold <= 1.0:
        raise ValueError("threshold is a cosine similarity, between -1 and 1")


class CommitMarker:
    """An `on_commit` callback that tells, later, whether its transaction committed or rolled back.

    Per-process caches (NumPy scope matrices, known pgvector indexes) use it for what they learnt inside
    a transaction: the marker sits in the connection's `run_on_commit` while the transaction is open,
    runs at commit, and is dropped unrun on rollback (of the transaction or of the savepoint that
    registered it).
    """

    __slots__ = ("connection", "committed")

    def __init__(self, connection: Any) -> None:
        self.connection = connection
        self.committed = False

    def __call__(self) -> None:
        # captureOnCommitCallbacks(execute=True) runs callbacks inside a test's transaction: no commit.
        if not self.connection.in_atomic_block:
            self.committed = True

    def holds(self) -> bool:
        """True once committed, or while its transaction is still open; False after a rollback."""
        return self.committed or self.pending()

    def pending(self) -> bool:
        """True while its transaction is still open."""
        return not self.committed and any(entry[1] is self for entry in self.connection.run_on_commit)


def tentative_marker(alias: str) -> CommitMarker | None:
    """A marker for what was read or created just now, or None when it is already committed.

    Outside atomic blocks (autocommit, or manual transactions that memproc cannot follow) there is
    nothing to track.
    """
    connection = connections[alias]
    if not connection.in_atomic_block:
        return None
    marker = CommitMarker(connection)
    transaction.on_commit(marker, using=alias)
    return marker
