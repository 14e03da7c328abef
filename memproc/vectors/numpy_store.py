"""Exact cosine search in-process, over a per-process cache of each scope's vectors (any database).

Reading every vector of a scope per query costs tens of milliseconds at 10k rows, so each process keeps,
per (database, embedder, dimensions, scope), the row ids and a float32 matrix of unit vectors. A search
costs ONE query, which returns both the scope's row count (an index-only count) and the rows past the
cached max pk; new rows are appended. Then:

- a count other than the rows the cache accounts for means rows disappeared (deletes, cascades): a
  second, index-only query lists the scope's pks and the cache drops the missing rows, without
  reloading vectors;
- a pk at or below the cached max that the cache never saw (a delete rolled back, or a row committed
  out of pk order by another process) needs a third query: the scope is reloaded;
- rows read inside a transaction are tentative: an `on_commit` marker records them, and if the
  transaction (or savepoint) rolls back, the marker vanishes unrun and the scope is rebuilt, because
  SQLite hands the rolled-back pks out again.

No `post_delete` receiver: one on MessageEmbedding would make Django load every embedding (vector
included) when a thread or message is deleted, instead of one DELETE; the count finds deletions on the
next search instead. But a vector can be inverted back to its text, so the services that delete
embeddings (deleting, editing, quarantining or excluding messages, deleting threads, purging and
forgetting) call `forget_cached` with the resources they touched: once their transaction commits,
this process holds no vector of those resources (nor of unscoped searches, which span them). Other
processes drop theirs at their next search of the scope, or when their least recently used scopes
are evicted; a restart clears them. `invalidate()` clears the cache (for instance after raw SQL
that rewrites rows in place, or a flush that resets sequences).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from django.db import connections, transaction

from memproc.exceptions import ConfigurationError
from memproc.models import THREAD_KEY_SEPARATOR, MessageEmbedding
from memproc.processors.store import VectorHit
from memproc.vectors.base import (
    CommitMarker,
    DjangoVectorStore,
    SearchFilter,
    scope_sql,
    tentative_marker,
)

DEFAULT_CACHE_BYTES = 512 * 1024 * 1024

CacheKey = tuple[str, str, int, str | None, str | None]


class NumpyVectorStore(DjangoVectorStore):
    """Exact search with NumPy; the default on databases without pgvector.

    A bounded number of queries per search: one; two after deletions; three after a rolled-back
    delete. `cache_bytes` bounds this process's vector cache (least recently used scopes go first).
    """

    def __init__(self, *, using: str | None = None, cache_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        super().__init__(using=using)
        if cache_bytes < 0:
            raise ConfigurationError("NumpyVectorStore(cache_bytes=...) must not be negative")
        self.cache_bytes = cache_bytes

    def search_unit(
        self,
        *,
        embedder_id: str,
        query: np.ndarray,
        top_k: int,
        thread_id: str | None,
        resource_id: str | None,
        threshold: float | None,
        filter: SearchFilter | None = None,
    ) -> list[VectorHit]:
        alias = self.db_for_read()
        key: CacheKey = (alias, embedder_id, query.size, thread_id, resource_id)
        matrix, message_ids, thread_ids = _cache.snapshot(key, self.cache_bytes)
        if filter and len(matrix):
            # The scope's cached matrix stays whole; the filter picks its admitted rows (one query).
            admitted = set(
                filter.messages(thread_id=thread_id, resource_id=resource_id)
                .using(alias)
                .values_list("id", flat=True)
            )
            rows = [i for i in range(len(matrix)) if message_ids[i] in admitted]
            matrix = matrix[rows]
            message_ids = [message_ids[i] for i in rows]
            thread_ids = [thread_ids[i] for i in rows]
        if not len(matrix):
            return []
        scores = row_scores(matrix, query)
        return best_hits(scores, message_ids, thread_ids, top_k=top_k, threshold=threshold)

    @staticmethod
    def invalidate(*, embedder_id: str | None = None) -> None:
        """Forgets cached vectors (of one embedder, or all); the next search reloads its scope."""
        _cache.invalidate(embedder_id=embedder_id)


def row_scores(matrix: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Each row's dot product with the query, on the calling thread.

    Not `matrix @ query`: multi-threaded OpenBLAS sgemv was 5-9x slower on 2 busy cores (its threads
    fight for the bandwidth of a memory-bound product). numpy 2's `vecdot` runs a single-threaded
    BLAS dot per row, 1.4-2.5x faster than `einsum`'s generic loop, which numpy 1.26 falls back to.
    """
    if _vecdot is not None:
        return _vecdot(matrix, query)
    return np.einsum("ij,j->i", matrix, query)


_vecdot = getattr(np, "vecdot", None)


def best_hits(
    scores: np.ndarray,
    message_ids: Sequence[str],
    thread_ids: Sequence[str],
    *,
    top_k: int,
    threshold: float | None,
) -> list[VectorHit]:
    """The top_k messages by their best row's score; ties go to the smaller message id."""
    candidates = None if threshold is None else np.flatnonzero(scores >= threshold)
    pool = scores if candidates is None else scores[candidates]
    wanted = min(len(pool), top_k * 2)
    while True:
        if wanted:
            top = np.argpartition(pool, len(pool) - wanted)[len(pool) - wanted :]
        else:
            top = np.empty(0, dtype=np.intp)
        if candidates is not None:
            top = candidates[top]
        ordered = sorted(top.tolist(), key=lambda i: (-scores[i], message_ids[i]))
        hits: dict[str, VectorHit] = {}
        for i in ordered:
            if message_ids[i] not in hits:
                hits[message_ids[i]] = VectorHit(message_ids[i], thread_ids[i], float(scores[i]))
                if len(hits) == top_k:
                    return list(hits.values())
        if wanted >= len(pool):  # every candidate seen: fewer than top_k messages
            return list(hits.values())
        wanted = min(len(pool), wanted * 4)  # chunks of the same messages filled the window: widen it


@dataclass(eq=False)
class _Entry:
    """One scope's rows of one embedder and size: unit vectors and ids, in pk order."""

    dimensions: int
    matrix: np.ndarray  # capacity x dimensions; rows [0, size) are live
    pks: np.ndarray  # capacity; int64
    message_ids: list[str]
    thread_ids: list[str]
    size: int = 0
    max_pk: int = 0
    skipped: frozenset[int] = frozenset()  # the scope's rows of another size, counted but not searched
    markers: list[CommitMarker] | None = None

    @classmethod
    def empty(cls, dimensions: int) -> _Entry:
        return cls(dimensions, np.empty((0, dimensions), dtype=np.float32), np.empty(0, np.int64), [], [])

    @property
    def known(self) -> int:
        """How many rows of the scope this entry accounts for: what COUNT(*) should say."""
        return self.size + len(self.skipped)

    @property
    def nbytes(self) -> int:
        return int(self.matrix.nbytes + self.pks.nbytes)

    def still_valid(self) -> bool:
        if not self.markers:
            return True
        if not all(marker.holds() for marker in self.markers):
            return False
        self.markers = [marker for marker in self.markers if not marker.committed]
        return True

    def append(self, rows: list[tuple[Any, ...]]) -> None:
        """Adds rows fetched past `max_pk`, in pk order; rows of another size are only counted."""
        if not rows:
            return
        self.max_pk = max(self.max_pk, int(rows[-1][0]))
        keep = [row for row in rows if row[1] == self.dimensions]
        if len(keep) < len(rows):
            self.skipped |= {int(row[0]) for row in rows if row[1] != self.dimensions}
        if not keep:
            return
        vectors = decode_vectors([row[4] for row in keep], self.dimensions)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        vectors /= np.where(norms > 0, norms, 1.0)
        needed = self.size + len(keep)
        if needed > len(self.matrix):  # grow geometrically: appends stay amortised O(new rows)
            capacity = max(needed, 2 * len(self.matrix), 64)
            matrix = np.empty((capacity, self.dimensions), dtype=np.float32)
            matrix[: self.size] = self.matrix[: self.size]
            pks = np.empty(capacity, dtype=np.int64)
            pks[: self.size] = self.pks[: self.size]
            self.matrix, self.pks = matrix, pks
        self.matrix[self.size : needed] = vectors
        self.pks[self.size : needed] = [int(row[0]) for row in keep]
        self.message_ids.extend(row[2] for row in keep)
        self.thread_ids.extend(row[3] for row in keep)
        self.size = needed

    def retain(self, present: np.ndarray) -> bool:
        """Drops rows whose pk is not in `present` (the scope's pks now).

        False when `present` holds a pk at or below `max_pk` that this entry never saw (a rolled-back
        delete, or a row committed out of pk order): only a reload can add it in its place.
        """
        live = self.pks[: self.size]
        skipped = np.fromiter(self.skipped, dtype=np.int64, count=len(self.skipped))
        below = present[present <= self.max_pk]
        if np.setdiff1d(below, np.concatenate([live, skipped]), assume_unique=True).size:
            return False
        if self.skipped:
            self.skipped = frozenset(skipped[np.isin(skipped, below)].tolist())
        keep = np.isin(live, present, assume_unique=True)
        if not keep.all():  # new arrays, so a search still holding the old ones is unaffected
            index = np.flatnonzero(keep)
            self.matrix, self.pks = self.matrix[index], live[index]
            self.message_ids = [self.message_ids[i] for i in index]
            self.thread_ids = [self.thread_ids[i] for i in index]
            self.size = len(index)
        return True

    def track(self, marker: CommitMarker) -> None:
        self.markers = [*(self.markers or []), marker]


class _ScopeCache:
    """Per-process, thread-safe, least-recently-used cache of scope matrices."""

    def __init__(self) -> None:
        self._entries: OrderedDict[CacheKey, tuple[threading.Lock, _Entry]] = OrderedDict()
        self._lock = threading.Lock()

    def snapshot(self, key: CacheKey, limit: int) -> tuple[np.ndarray, list[str], list[str]]:
        """The scope's current unit vectors, message ids and thread ids, refreshed with one query."""
        with self._lock:
            slot = self._entries.get(key)
            if slot is None:
                slot = self._entries[key] = (threading.Lock(), _Entry.empty(key[2]))
            self._entries.move_to_end(key)
        entry_lock, entry = slot
        with entry_lock:
            entry = self._refresh(key, entry)
            with self._lock:
                if key in self._entries:
                    self._entries[key] = (entry_lock, entry)
                self._evict(limit, keep=key)
            # Views, not copies: later appends write past `size`, and rebuilds make new arrays.
            return entry.matrix[: entry.size], entry.message_ids, entry.thread_ids

    def _refresh(self, key: CacheKey, entry: _Entry) -> _Entry:
        alias, embedder_id, dimensions, thread_id, resource_id = key
        connection = connections[alias]
        scope = (connection, embedder_id, thread_id, resource_id)
        if not entry.still_valid():
            entry = _Entry.empty(dimensions)
        count, rows = fetch_scope(*scope, after=entry.max_pk)
        entry.append(rows)
        changed = bool(rows)
        if count != entry.known:  # rows vanished, or arrived below the cached max pk
            changed = True
            if not entry.retain(fetch_pks(*scope)):
                entry = _Entry.empty(dimensions)
                entry.append(fetch_scope(*scope, after=0)[1])
        if changed and (marker := tentative_marker(alias)) is not None:
            entry.track(marker)
        return entry

    def _evict(self, limit: int, *, keep: CacheKey) -> None:
        total = sum(entry.nbytes for _, entry in self._entries.values())
        for key in list(self._entries):
            if total <= limit:
                break
            if key != keep:
                total -= self._entries.pop(key)[1].nbytes

    def invalidate(self, *, embedder_id: str | None = None) -> None:
        with self._lock:
            for key in list(self._entries):
                if embedder_id is None or key[1] == embedder_id:
                    del self._entries[key]

    def drop_resources(self, resource_ids: frozenset[str]) -> None:
        """Drops the scopes that may hold the resources' rows: theirs, their threads', unscoped ones."""
        thread_prefixes = tuple(f"{r}{THREAD_KEY_SEPARATOR}" for r in resource_ids)
        with self._lock:
            for key in list(self._entries):
                _, _, _, thread_id, resource_id = key
                unscoped = thread_id is None and resource_id is None
                if unscoped or resource_id in resource_ids or (thread_id or "").startswith(thread_prefixes):
                    del self._entries[key]


_cache = _ScopeCache()


def forget_cached(resource_ids: Iterable[str], *, using: str) -> None:
    """Once the current transaction on `using` commits (at once outside one), this process's cached
    vectors of `resource_ids` are dropped: rows of theirs were deleted or changed (module docstring)."""
    resources = frozenset(r for r in resource_ids if r)
    if resources:
        transaction.on_commit(lambda: _cache.drop_resources(resources), using=using)


def fetch_scope(
    connection: Any, embedder_id: str, thread_id: str | None, resource_id: str | None, *, after: int
) -> tuple[int, list[tuple[Any, ...]]]:
    """(rows in the scope, rows past pk `after` as (pk, dimensions, message_id, thread_id, vector)).

    One statement, so the count and the rows come from the same snapshot. The count reads only the
    (model, resource_id) / (model, thread_id) indexes.
    """
    sql, params = _scope_sql(connection, embedder_id, thread_id, resource_id, after)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        result = cursor.fetchall()
    count = next(int(row[1] or 0) for row in result if row[0] == 0)
    rows = sorted((row[1:] for row in result if row[0] == 1), key=lambda row: row[0])
    return count, rows


def fetch_pks(
    connection: Any, embedder_id: str, thread_id: str | None, resource_id: str | None
) -> np.ndarray:
    """The scope's pks, sorted: an index-only read, to find deleted rows without reloading vectors."""
    where, params = _scope_where(connection, embedder_id, thread_id, resource_id)
    table = connection.ops.quote_name(MessageEmbedding._meta.db_table)
    pk = connection.ops.quote_name(MessageEmbedding._meta.pk.column)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {pk} FROM {table} WHERE {where}", params)
        return np.sort(np.fromiter((row[0] for row in cursor.fetchall()), dtype=np.int64))


def _scope_sql(
    connection: Any, embedder_id: str, thread_id: str | None, resource_id: str | None, after: int
) -> tuple[str, list[Any]]:
    column = _columns(connection)
    scope, params = _scope_where(connection, embedder_id, thread_id, resource_id)
    table = connection.ops.quote_name(MessageEmbedding._meta.db_table)
    sql = (
        f"SELECT 0, COUNT(*), NULL, NULL, NULL, NULL FROM {table} WHERE {scope} "
        f"UNION ALL "
        f"SELECT 1, {column['id']}, {column['dimensions']}, {column['message']}, {column['thread_id']}, "
        f"{column['vector']} FROM {table} WHERE {scope} AND {column['id']} > %s"
    )
    return sql, [*params, *params, after]


def _scope_where(
    connection: Any, embedder_id: str, thread_id: str | None, resource_id: str | None
) -> tuple[str, list[Any]]:
    return scope_sql(_columns(connection), embedder_id, thread_id, resource_id)


def _columns(connection: Any) -> dict[str, str]:
    """The embedding table's quoted column names (7 µs, beside a search's query)."""
    qn = connection.ops.quote_name
    return {name: qn(MessageEmbedding._meta.get_field(name).column) for name in _COLUMNS}


_COLUMNS = ("id", "model", "thread_id", "resource_id", "dimensions", "message", "vector")


def decode_vectors(values: list[Any], dimensions: int) -> np.ndarray:
    """float32 BLOBs (SQLite, MySQL, ...) in one `frombuffer`; other forms through the field."""
    if all(isinstance(v, (bytes, bytearray, memoryview)) for v in values):
        raw = b"".join(bytes(v) for v in values)
        if len(raw) == len(values) * dimensions * 4:
            return np.frombuffer(raw, dtype=np.float32).reshape(len(values), dimensions).copy()
    field = MessageEmbedding._meta.get_field("vector")
    return np.vstack([field.to_python(v) for v in values]).astype(np.float32)
