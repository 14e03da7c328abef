"""The vector-store protocol, the row type it stores, and what every Django-backed store shares."""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from datetime import date, datetime, time
from typing import Any, Protocol, runtime_checkable

import numpy as np
from django.db import connections, router, transaction
from django.utils import timezone

from memproc.db import insert_rows, one_sqlite_writer
from memproc.embedders import vector_problem
from memproc.exceptions import ConfigurationError, ValidationError
from memproc.models import MessageEmbedding
from memproc.processors.store import VectorHit
from memproc.selectors.messages import messages_filtered
from memproc.selectors.threads import thread_key_for


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


@dataclass(frozen=True)
class SearchFilter:
    """Narrows a search beyond its scope: to messages created between `start` and `end` (inclusive,
    each optional) in threads whose metadata holds every key of `thread_metadata` with that value.

    Django-backed stores apply it in the database (pgvector: inside the one search statement; NumPy:
    one query for the scope's admitted message ids). `search_filtered` runs it on any store.
    """

    start: datetime | None = None
    end: datetime | None = None
    thread_metadata: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, *, date_range: Any = None, thread_metadata: Mapping[str, Any] | None = None) -> SearchFilter:
        """A filter from what a caller passes: `date_range` is `(start, end)` or `{"start", "end"}`,
        either None for open; naive datetimes are in the current time zone and dates cover their
        whole day. A malformed range is a ValidationError."""
        start, end = _date_range(date_range)
        return cls(start=start, end=end, thread_metadata=dict(thread_metadata or {}))

    def __bool__(self) -> bool:
        return self.start is not None or self.end is not None or bool(self.thread_metadata)

    def messages(self, *, thread_id: str | None, resource_id: str | None) -> Any:
        """The admitted messages of a scope, as a queryset."""
        return messages_filtered(
            thread_key=None
            if thread_id is None
            else thread_key_for(thread_id=thread_id, resource_id=resource_id),
            resource_id=resource_id,
            start=self.start,
            end=self.end,
            thread_metadata=self.thread_metadata,
        )

    def admits_time(self, created_at: datetime | None) -> bool:
        """Whether a message created at `created_at` falls within the date range."""
        if created_at is None:
            return self.start is None and self.end is None
        return (self.start is None or created_at >= self.start) and (
            self.end is None or created_at <= self.end
        )


def _date_range(value: Any) -> tuple[datetime | None, datetime | None]:
    if value is None:
        return None, None
    if isinstance(value, Mapping):
        unknown = set(value) - {"start", "end"}
        if unknown:
            raise ValidationError(f"date_range has unknown keys: {', '.join(sorted(map(str, unknown)))}")
        start, end = value.get("start"), value.get("end")
    elif isinstance(value, (tuple, list)) and len(value) == 2:
        start, end = value
    else:
        raise ValidationError("date_range must be a (start, end) pair or {'start': ..., 'end': ...}")
    start, end = _moment(start, time.min), _moment(end, time.max)
    if start is not None and end is not None and start > end:
        raise ValidationError("date_range starts after it ends")
    return start, end


def _moment(value: Any, bound: time) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, date) and not isinstance(value, datetime):
        value = datetime.combine(value, bound)
    if not isinstance(value, datetime):
        raise ValidationError(f"date_range bounds are datetimes, dates or None, not {type(value).__name__}")
    return timezone.make_aware(value) if timezone.is_naive(value) else value


def search_filtered(store: Any, *, filter: SearchFilter | None, **search: Any) -> list[VectorHit]:
    """`store.search(**search)` narrowed by `filter`, on any store: stores whose `search` takes a
    `filter` apply it themselves; for others the search over-fetches and the hits are filtered with
    one query (which may then return fewer than `top_k` hits)."""
    if not filter:
        return store.search(**search)
    # A DjangoVectorStore subclass searches in `search_unit`; its `search` always takes the filter.
    if "filter" in _parameters(getattr(store, "search_unit", store.search)):
        return store.search(**search, filter=filter)
    hits = store.search(**{**search, "top_k": int(search["top_k"]) * 8})
    admitted = set(
        filter.messages(thread_id=search.get("thread_id"), resource_id=search.get("resource_id"))
        .filter(id__in=[h.message_id for h in hits])
        .values_list("id", flat=True)
    )
    return [h for h in hits if h.message_id in admitted][: int(search["top_k"])]


def _parameters(function: Any) -> Mapping[str, Any]:
    try:
        return inspect.signature(function).parameters
    except (TypeError, ValueError):
        return {}


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
        `resource_id` narrow the scope; `threshold` is the minimum similarity. memproc's stores also
        take `filter=SearchFilter(...)`; for stores without it, `search_filtered` filters the hits.
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
        alias = self.db_for_write()
        with one_sqlite_writer(alias):
            insert_rows(
                MessageEmbedding,
                [embedding_values(row, now) for row in rows],
                fields=EMBEDDING_COLUMNS,
                using=alias,
                ignore_conflicts=True,
            )

    def deferred_index(self, embedder_id: str, dimensions: int) -> AbstractContextManager[None]:
        """A block of bulk writes during which no search index is maintained row by row; the store
        brings its index up to date after it (pgvector: a background job builds it, off the caller's
        time). Nothing to defer for stores without an index."""
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
        filter: SearchFilter | None = None,
    ) -> list[VectorHit]:
        """Checks the arguments and normalises the query once for every back end. `filter` narrows
        the scope further (a `SearchFilter`); a subclass's `search_unit` gets it only when given."""
        check_search_args(top_k=top_k, threshold=threshold)
        query = query_vector(vector)
        if not query.any():
            return []  # nothing is similar to the zero vector
        narrowed = {"filter": filter} if filter else {}
        return self.search_unit(
            embedder_id=embedder_id,
            query=query,
            top_k=top_k,
            thread_id=thread_id,
            resource_id=resource_id,
            threshold=threshold,
            **narrowed,
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


def scope_sql(
    column: Mapping[str, str], embedder_id: str, thread_id: str | None, resource_id: str | None
) -> tuple[str, list[Any]]:
    """The WHERE clause of a search's scope over the embeddings table (`column`: its quoted column
    names), for the stores that write their statement by hand (pgvector's search, the NumPy scan)."""
    where, params = [f"{column['model']} = %s"], [embedder_id]
    if thread_id is not None:
        where.append(f"{column['thread_id']} = %s")
        params.append(thread_id)
    if resource_id is not None:
        where.append(f"{column['resource_id']} = %s")
        params.append(resource_id)
    return " AND ".join(where), params


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
