"""pgvector search on PostgreSQL: a partial HNSW cosine index per embedder, one statement per search.

The `vector` column is untyped so embedders of any size share the table; each (embedder, dimensions)
gets `memproc_emb_hnsw_<hash>` on `(vector::halfvec(d)) halfvec_cosine_ops WHERE model = ... AND
dimensions = d AND indexed` (`vector(d)` with HNSW_INDEX_TYPE "vector"; the dimensions guard keeps an
embedder id reused at another size from breaking the cast, and so inserts). It is created on the
first store or search of that embedder in a process. The HNSW branch orders by the index's type and
returns full-precision distances.

This store writes new rows with `indexed = false` (the column's default, for other writers, is
true: their rows enter the graph on insert), so a turn's embeddings pay no HNSW insertion (a graph
search and rewrites of neighbour lists, ~2 ms a vector). They form the embedder's *tail*; once this
process has written `merge_after` of them it enqueues `memproc.index_merge`, which marks the tail
in batches (`embedding_index_merge`), so the graph grows off the turn: on a Celery worker, or, with
inline background work, in a daemon thread of this process. A bulk load with the index
held back (`deferred_index`) writes its rows marked, since the index is built over them at the end.

A search is ONE round trip: `SET LOCAL hnsw.ef_search`, `SET LOCAL hnsw.iterative_scan` (pgvector 0.8+)
and a SELECT, sent together as one simple-protocol string. In autocommit the three run as one implicit
transaction, so the settings last for that search only; inside a caller's transaction they last until
its end (harmless: they only tune HNSW scans). No session SET, so poolers in transaction mode are fine.

The SELECT picks its own strategy, with no extra round trip: it counts the scope's rows up to
`EXACT_SEARCH_MAX_ROWS` (an index-only scan) and, through two branches gated on that count, either
scores every row of the scope exactly (small scopes: exact, and cheaper than HNSW) or orders by the
HNSW index expression with iterative scanning, so a filter on one resource or thread still yields
`top_k` rows when the scope is a small fraction of the table. In that branch the planner may still
prefer the (model, resource_id) btree and a sort for a selective scope; that answer is exact. The
HNSW branch is joined by an exact scan of the scope's tail (through the partial btree
`memproc_emb_tail`), and the two candidate lists are merged by distance. The statement also returns
the count; a scope found larger than the limit is searched without the count (and without the exact
branch) for LARGE_SCOPE_SECONDS: scopes grow as conversations do, and the count is an index scan of
up to `exact_max_rows + 1` entries on every search.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
from django.db import DatabaseError, connections, transaction
from django.utils import timezone

from memproc import background, logs
from memproc.conf import settings
from memproc.db import insert_rows
from memproc.exceptions import ConfigurationError
from memproc.fields import is_postgres, vector_literal
from memproc.models import MessageEmbedding
from memproc.processors.store import VectorHit
from memproc.vectors.base import (
    EMBEDDING_COLUMNS,
    CommitMarker,
    DjangoVectorStore,
    EmbeddingRow,
    SearchFilter,
    embedding_values,
    tentative_marker,
)

logger = logging.getLogger("memproc.vectors")

# Rows fetched from the HNSW branch per wanted message: room for several chunks of one message.
CHUNK_OVERFETCH = 4
# Unmarked rows a process writes for one embedder before it enqueues a merge of the tail.
MERGE_AFTER_ROWS = 500
# How long a scope found larger than `exact_max_rows` is searched without counting it again, and how
# many such scopes a process remembers. A scope that shrinks meanwhile (a thread deleted by another
# process) is still answered, by the HNSW branch, until its entry expires.
LARGE_SCOPE_SECONDS = 300.0
LARGE_SCOPE_ENTRIES = 4096


@dataclass(frozen=True, slots=True)
class _IndexState:
    """What this process learnt about one index; `marker` when it learnt it inside a transaction."""

    created: bool
    marker: CommitMarker | None

    def settled(self) -> bool:
        """No need to try again: it exists, or it failed and trying again now would fail too."""
        if self.marker is None:
            return True
        if self.created:
            return self.marker.holds()  # gone if the creating transaction rolled back
        return self.marker.pending()  # a failure inside a transaction: retry once it has ended


_known_indexes: dict[tuple[str, str, int], _IndexState] = {}
_deferred: set[tuple[str, str, int]] = set()  # indexes this process holds back for a bulk load
_pgvector_versions: dict[str, tuple[int, ...]] = {}
_unmerged: dict[tuple[str, str, int], int] = {}  # rows this process wrote unmarked since its last merge
_merging: dict[tuple[str | None, str, int], threading.Thread] = {}  # inline merges running in threads
_large_scopes: OrderedDict[tuple[Any, ...], float] = OrderedDict()  # scope -> when it was counted large
HALFVEC_SINCE = (0, 7)  # the pgvector release that added halfvec
_lock = threading.Lock()


class PgvectorStore(DjangoVectorStore):
    """Cosine search with pgvector; the default on PostgreSQL.

    `ef_search` and `exact_max_rows` default to the HNSW_EF_SEARCH and EXACT_SEARCH_MAX_ROWS settings;
    `merge_after` is how many unmarked rows of one embedder a process writes before it enqueues the
    index merge (None: never; run `memproc_reindex --merge-index` or the task on a schedule instead).
    """

    def __init__(
        self,
        *,
        using: str | None = None,
        ef_search: int | None = None,
        exact_max_rows: int | None = None,
        merge_after: int | None = MERGE_AFTER_ROWS,
    ) -> None:
        super().__init__(using=using)
        if merge_after is not None and merge_after <= 0:
            raise ConfigurationError("PgvectorStore(merge_after=...) must be positive or None")
        self.merge_after = merge_after
        if ef_search is not None and not 1 <= ef_search <= 1000:
            raise ConfigurationError("PgvectorStore(ef_search=...) must be between 1 and 1000")
        if exact_max_rows is not None and exact_max_rows < 0:
            raise ConfigurationError("PgvectorStore(exact_max_rows=...) must not be negative")
        self.ef_search = ef_search
        self.exact_max_rows = exact_max_rows

    def store(self, rows: Sequence[EmbeddingRow]) -> None:
        """Writes the rows unmarked (no HNSW insertion), or marked while a bulk load of this process
        holds their index back; enqueues the tail's merge once enough unmarked rows were written."""
        if not rows:
            return
        alias = self.db_for_write()
        keys = [_index_key(alias, row.model, row.dimensions) for row in rows]
        for _, model, dimensions, _ in set(keys):
            self.ensure_index(model, dimensions)
        with _lock:
            held = [key in _deferred for key in keys]
        now = timezone.now()
        values = [
            {**embedding_values(row, now), "indexed": deferred}
            for row, deferred in zip(rows, held, strict=True)
        ]
        fields = (*EMBEDDING_COLUMNS, "indexed")
        insert_rows(MessageEmbedding, values, fields=fields, using=alias, ignore_conflicts=True)
        self._count_unmerged([row for row, deferred in zip(rows, held, strict=True) if not deferred])

    def _count_unmerged(self, rows: Sequence[EmbeddingRow]) -> None:
        if self.merge_after is None or not rows:
            return
        alias = self.db_for_write()
        due = []
        with _lock:
            for row in rows:
                key = (alias, row.model, int(row.dimensions))
                _unmerged[key] = _unmerged.get(key, 0) + 1
                if _unmerged[key] >= self.merge_after:
                    _unmerged[key] = 0
                    due.append(key)
        for key in dict.fromkeys(due):
            # Other processes write tails too; the merge marks every unmarked row, whoever wrote it.
            kwargs = {"embedder_id": key[1], "dimensions": key[2], "using": self.using}
            background.enqueue("memproc.index_merge", kwargs=kwargs, inline=partial(merge_in_thread, kwargs))

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
        connection = connections[alias]
        self.ensure_index(embedder_id, query.size, using=alias)
        sql, large_key = self._search(
            connection,
            embedder_id=embedder_id,
            query=query,
            top_k=top_k,
            thread_id=thread_id,
            resource_id=resource_id,
            threshold=threshold,
            filter=filter,
        )
        with connection.cursor() as cursor:
            cursor.execute(sql)
            rows = last_result(cursor, connection)
        if large_key is not None and rows and rows[0][3] > large_key[-1] and not connection.in_atomic_block:
            # Counted outside a transaction: no uncommitted rows of a caller's made it look large.
            _remember_large_scope(large_key)
        return [VectorHit(row[0], row[1], 1.0 - float(row[2])) for row in rows]

    def search_sql(self, connection: Any, **search: Any) -> str:
        """The whole search as one SQL string, values inlined by the driver's own quoting; takes
        `search_unit`'s arguments (`query` a normalised array).

        Inlined rather than bound because several statements can share one round trip only without
        bind parameters; inlined constants also let the planner match the partial index predicate.
        A `filter` joins the scope as `message_id IN (admitted messages)`: the HNSW branch's
        iterative scan keeps going until `top_k` admitted rows are found.
        """
        return self._search(connection, **search)[0]

    def _search(
        self,
        connection: Any,
        *,
        embedder_id: str,
        query: np.ndarray,
        top_k: int,
        thread_id: str | None = None,
        resource_id: str | None = None,
        threshold: float | None = None,
        filter: SearchFilter | None = None,
    ) -> tuple[str, tuple[Any, ...] | None]:
        """The search's SQL and, when its rows carry the scope's count, the key to remember a large
        scope by (its last item is the limit). A filtered scope is counted on every search."""
        ef_search = self.ef_search or int(settings.HNSW_EF_SEARCH)
        exact_max_rows = self.exact_max_rows
        if exact_max_rows is None:
            exact_max_rows = int(settings.EXACT_SEARCH_MAX_ROWS)
        # No parallel workers: the exact branch's top-N sort got a Gather Merge whose two idle workers
        # cost ~9 ms to launch on every search, even when the HNSW branch answered.
        prefix = (
            f"SET LOCAL max_parallel_workers_per_gather = 0; SET LOCAL hnsw.ef_search = {int(ef_search)}; "
        )
        if pgvector_version(connection) >= (0, 8):
            prefix += "SET LOCAL hnsw.iterative_scan = relaxed_order; "
        scope, scope_params = _scope_clause(connection, embedder_id, thread_id, resource_id)
        key = None
        if filter:
            admitted, admitted_params = _admitted_sql(connection, filter, thread_id, resource_id)
            scope = f"{scope} AND {_columns(connection)['message']} IN ({admitted})"
            scope_params = [*scope_params, *admitted_params]
        else:
            key = (connection.alias, embedder_id, int(query.size), thread_id, resource_id, exact_max_rows)
        counted = key is None or not _scope_is_large(key)
        select, params = _select_sql(
            connection,
            scope,
            scope_params,
            literal=vector_literal(query),
            dims=int(query.size),
            top_k=top_k,
            exact_max_rows=exact_max_rows if counted else None,
        )
        if threshold is not None:
            select += " HAVING MIN(distance) <= %s"
            params.append(1.0 - float(threshold))
        select += f" ORDER BY distance, message_id LIMIT {int(top_k)}"
        return prefix + connection.ops.compose_sql(select, params), key if counted else None

    def ensure_index(
        self, embedder_id: str, dimensions: int, *, using: str | None = None, concurrently: bool = False
    ) -> None:
        """Creates the embedder's HNSW index unless this process knows it exists.

        Cheap on an empty table; on a large one it locks writes while it builds, so deploy it ahead
        with `concurrently=True` (outside a transaction) from a command or a migration. While a bulk
        load holds the index back (`deferred_index`, in any process), nothing is created or cached.
        """
        alias = using or self.db_for_write()
        key = _index_key(alias, embedder_id, dimensions)
        with _lock:
            state = _known_indexes.get(key)
            if key in _deferred or (state is not None and state.settled()):
                return
        connection = connections[alias]
        if not is_postgres(connection):
            raise ConfigurationError("PgvectorStore needs PostgreSQL with the pgvector extension")
        if concurrently and connection.in_atomic_block:
            raise ValueError("CREATE INDEX CONCURRENTLY cannot run inside a transaction")
        name = index_name(embedder_id, int(dimensions), key[-1])
        sql = index_sql(connection, embedder_id, int(dimensions), concurrently=concurrently, kind=key[-1])
        created = True
        try:
            if concurrently:
                with connection.cursor() as cursor:
                    cursor.execute(sql)
            else:
                with transaction.atomic(using=alias), connection.cursor() as cursor:
                    # Another session is bulk loading with this index held back: leave it to that one.
                    cursor.execute("SELECT pg_try_advisory_xact_lock_shared(%s)", [deferral_lock(name)])
                    if not cursor.fetchone()[0]:
                        return
                    cursor.execute(sql)
        except DatabaseError as exc:
            # Another process created it at the same moment, this role may not create indexes, or
            # this transaction already wrote embeddings ("pending trigger events"). Searches still
            # work, exactly; retry in a later transaction, not on every search.
            logs.failure(
                logger, "Could not create the HNSW index for %s", embedder_id, exc=exc, level=logging.WARNING
            )
            created = False
        with _lock:
            _known_indexes[key] = _IndexState(created, tentative_marker(alias))

    @contextmanager
    def deferred_index(self, embedder_id: str, dimensions: int) -> Iterator[None]:
        """Holds the embedder's HNSW index back for a bulk load, then builds it once.

        pgvector's own advice: inserting a row into an HNSW graph costs milliseconds (it searches the
        graph and rewrites its neighbours' lists), building the graph over the loaded rows costs a
        fraction of that per row. The index is dropped (CONCURRENTLY), other sessions are kept from
        re-creating it by an advisory lock, and at the end it is built CONCURRENTLY (writes go on) and
        the table is vacuumed and analysed. Searches meanwhile stay correct: without the index they
        score rows exactly. Call it outside a transaction; the build takes `maintenance_work_mem`
        (the graph of N d-dimensional rows needs about N * (2d + 200) bytes to build in memory with
        a halfvec index, N * (4d + 200) with a vector one).
        """
        alias = self.db_for_write()
        connection = connections[alias]
        if not is_postgres(connection):
            raise ConfigurationError("PgvectorStore needs PostgreSQL with the pgvector extension")
        if connection.in_atomic_block:
            raise ValueError(
                "deferred_index() must start outside a transaction: it drops and builds an index"
            )
        key = _index_key(alias, embedder_id, dimensions)
        name = index_name(embedder_id, int(dimensions), key[-1])
        qn = connection.ops.quote_name
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_lock(%s)", [deferral_lock(name)])
        try:
            with _lock:
                _deferred.add(key)
                _known_indexes.pop(key, None)
            with connection.cursor() as cursor:
                cursor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {qn(name)}")
            try:
                yield
            finally:
                with _lock:
                    _deferred.discard(key)
                self.build_index(embedder_id, int(dimensions))
        finally:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [deferral_lock(name)])

    def build_index(self, embedder_id: str, dimensions: int, *, analyze: bool = True) -> None:
        """Builds the embedder's index CONCURRENTLY (an interrupted build leaves an invalid index:
        it is dropped, so the next call starts over), then VACUUM ANALYZE for the planner's statistics
        and the visibility map that the capped scope count scans."""
        alias = self.db_for_write()
        connection = connections[alias]
        qn = connection.ops.quote_name
        key = _index_key(alias, embedder_id, dimensions)
        name = index_name(embedder_id, int(dimensions), key[-1])
        memory = settings.HNSW_BUILD_MEMORY
        with connection.cursor() as cursor:
            if memory:
                cursor.execute("SELECT set_config('maintenance_work_mem', %s, false)", [str(memory)])
            try:
                try:
                    cursor.execute(index_sql(connection, embedder_id, int(dimensions), concurrently=True))
                except BaseException:
                    cursor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {qn(name)}")
                    raise
                if analyze:
                    cursor.execute(f"VACUUM (ANALYZE) {qn(MessageEmbedding._meta.db_table)}")
            finally:
                if memory:
                    cursor.execute("RESET maintenance_work_mem")
        with _lock:
            _known_indexes[key] = _IndexState(True, None)


def pgvector_version(connection: Any) -> tuple[int, ...]:
    """The installed extension's version, asked once per database and process."""
    version = _pgvector_versions.get(connection.alias)
    if version is None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
            row = cursor.fetchone()
        if row is None:
            raise ConfigurationError(
                "The pgvector extension is not installed in this database: run memproc's migrations "
                "(they CREATE EXTENSION vector) as a user allowed to create it."
            )
        version = _pgvector_versions[connection.alias] = _parse_version(row[0])
    return version


@dataclass
class IndexBuild:
    """What `build_indexes` did: index names built, dropped, and (name, error) of builds that failed."""

    built: list[str]
    dropped: list[str]
    failed: list[tuple[str, str]]


def build_indexes(*, using: str | None = None) -> IndexBuild:
    """Builds the missing HNSW index of every embedder with stored rows, in HNSW_INDEX_TYPE's type,
    CONCURRENTLY (writes go on), then drops that embedder's index of the other type, if any.

    For deploying indexes ahead of the first search (on a large table the lazy build of
    `ensure_index` would hold writes back while it runs) and for switching HNSW_INDEX_TYPE. An
    embedder keeps its old index when the new one fails to build (a `vector` index takes at most
    2,000 dimensions). Call it outside a transaction.
    """
    store = PgvectorStore(using=using)
    alias = store.db_for_write()
    connection = connections[alias]
    if not is_postgres(connection):
        raise ConfigurationError("HNSW indexes need PostgreSQL with the pgvector extension")
    if connection.in_atomic_block:
        raise ValueError("build_indexes() must run outside a transaction: it builds CONCURRENTLY")
    kind = index_type(connection)
    other = "vector" if kind == "halfvec" else "halfvec"
    qn = connection.ops.quote_name
    pairs = MessageEmbedding.objects.using(alias).order_by().values_list("model", "dimensions").distinct()
    existing = _hnsw_index_names(connection)
    done = IndexBuild([], [], [])
    for model, dimensions in list(pairs):
        name = index_name(model, dimensions, kind)
        if name not in existing:
            try:
                store.build_index(model, dimensions, analyze=False)
            except DatabaseError as exc:
                done.failed.append((name, str(exc).strip()))
                continue
            done.built.append(name)
        stale = index_name(model, dimensions, other)
        if stale in existing:
            with connection.cursor() as cursor:
                cursor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {qn(stale)}")
            done.dropped.append(stale)
    if done.built:
        with connection.cursor() as cursor:
            cursor.execute(f"VACUUM (ANALYZE) {qn(MessageEmbedding._meta.db_table)}")
    return done


def _hnsw_index_names(connection: Any) -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = %s AND indexname LIKE %s",
            [MessageEmbedding._meta.db_table, "memproc\\_emb\\_hnsw\\_%"],
        )
        return {row[0] for row in cursor.fetchall()}


def merge_in_thread(kwargs: dict[str, Any]) -> threading.Thread | None:
    """Inline mode's way to run `memproc.index_merge`: in a daemon thread of this process, so the
    request whose embeddings crossed the threshold does not wait for the graph insertions either.
    One thread per embedder at a time; a failure is logged, and the next threshold tries again (the
    tail is still there, and still searched)."""
    key = (kwargs.get("using"), kwargs["embedder_id"], kwargs["dimensions"])

    def merge() -> None:
        try:
            background.run_task_inline("memproc.index_merge", kwargs)
        except Exception as exc:
            logs.failure(
                logger, "memproc: the index merge of %s failed; it is tried again later", key[1], exc=exc
            )
        finally:
            connections.close_all()  # this thread's connections only
            with _lock:
                _merging.pop(key, None)

    with _lock:
        if key in _merging:
            return None
        thread = _merging[key] = threading.Thread(target=merge, name="memproc-index-merge", daemon=True)
    thread.start()
    return thread


def index_type(connection: Any = None) -> str:
    """What the HNSW indexes hold (the HNSW_INDEX_TYPE setting): "vector" or "halfvec". Given a
    connection, "vector" where its pgvector predates halfvec (0.7)."""
    kind = str(settings.HNSW_INDEX_TYPE)
    if kind == "halfvec" and connection is not None and pgvector_version(connection) < HALFVEC_SINCE:
        return "vector"
    return kind


def index_name(embedder_id: str, dimensions: int, kind: str | None = None) -> str:
    # "\x00indexed": the partial index over marked rows (migration 0009) is named apart from the full
    # index that preceded it; a halfvec index is named apart from the vector one, so that switching
    # HNSW_INDEX_TYPE finds (or builds) its own.
    kind = kind or index_type()
    suffix = "" if kind == "vector" else f"\x00{kind}"
    digest = hashlib.sha256(f"{embedder_id}\x00{dimensions}\x00indexed{suffix}".encode()).hexdigest()[:16]
    return f"memproc_emb_hnsw_{digest}"


def deferral_lock(name: str) -> int:
    """The advisory lock key (a signed 64-bit integer) a bulk load holds while it defers `name`."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


def index_sql(
    connection: Any, embedder_id: str, dimensions: int, *, concurrently: bool = False, kind: str | None = None
) -> str:
    column = _columns(connection)
    qn = connection.ops.quote_name
    kind = kind or index_type(connection)
    return connection.ops.compose_sql(
        f"CREATE INDEX {'CONCURRENTLY ' if concurrently else ''}IF NOT EXISTS "
        f"{qn(index_name(embedder_id, dimensions, kind))} ON {qn(MessageEmbedding._meta.db_table)} "
        f"USING hnsw (({column['vector']}::{kind}({int(dimensions)})) {kind}_cosine_ops) "
        f"WITH (m = {int(settings.HNSW_M)}, ef_construction = {int(settings.HNSW_EF_CONSTRUCTION)}) "
        f"WHERE {column['model']} = %s AND {column['dimensions']} = {int(dimensions)} "
        f"AND {column['indexed']}",
        [embedder_id],
    )


def last_result(cursor: Any, connection: Any) -> list[tuple[Any, ...]]:
    """Rows of the last statement of a multi-statement execute (psycopg 3 starts at the first)."""
    rows = cursor.fetchall() if cursor.description else []
    while True:
        try:
            more = cursor.nextset()
        except connection.Database.NotSupportedError:  # psycopg2 already sits on the last result
            return rows
        if not more:
            return rows
        if cursor.description:
            rows = cursor.fetchall()


def forget_indexes() -> None:
    """Forgets which indexes exist and which scopes were large (for tests that drop or delete them)."""
    with _lock:
        _known_indexes.clear()
        _pgvector_versions.clear()
        _large_scopes.clear()


def _index_key(alias: str, embedder_id: str, dimensions: int) -> tuple[str, str, int, str]:
    """What this process knows about an index (created, held back) is keyed by this."""
    return (alias, embedder_id, int(dimensions), index_type(connections[alias]))


def _scope_is_large(key: tuple[Any, ...]) -> bool:
    with _lock:
        seen = _large_scopes.get(key)
        if seen is None:
            return False
        if time.monotonic() - seen > LARGE_SCOPE_SECONDS:
            del _large_scopes[key]
            return False
        return True


def _remember_large_scope(key: tuple[Any, ...]) -> None:
    with _lock:
        _large_scopes[key] = time.monotonic()
        _large_scopes.move_to_end(key)
        while len(_large_scopes) > LARGE_SCOPE_ENTRIES:
            _large_scopes.popitem(last=False)


def _scope_clause(
    connection: Any, embedder_id: str, thread_id: str | None, resource_id: str | None
) -> tuple[str, list[Any]]:
    column = _columns(connection)
    where, params = [f"{column['model']} = %s"], [embedder_id]
    if thread_id is not None:
        where.append(f"{column['thread_id']} = %s")
        params.append(thread_id)
    if resource_id is not None:
        where.append(f"{column['resource_id']} = %s")
        params.append(resource_id)
    return " AND ".join(where), params


def _admitted_sql(
    connection: Any, filter: SearchFilter, thread_id: str | None, resource_id: str | None
) -> tuple[str, list[Any]]:
    """The SELECT of the message ids a filter admits in the scope, with its parameters."""
    admitted = filter.messages(thread_id=thread_id, resource_id=resource_id).values("id")
    sql, params = admitted.query.get_compiler(connection=connection).as_sql()
    return sql, list(params)


def _select_sql(
    connection: Any,
    scope: str,
    scope_params: list[Any],
    *,
    literal: str,
    dims: int,
    top_k: int,
    exact_max_rows: int | None,
) -> tuple[str, list[Any]]:
    """Counts the scope (capped), then runs the exact branch or the HNSW and tail branches; with
    `exact_max_rows` None (a scope known to be large), the HNSW and tail branches alone.

    Each branch is gated on the count by a one-time filter, so the other is never executed. The exact
    branch measures distance on the untyped column, which no index matches: it scores every row of
    the scope (through the btree on model and thread or resource) and keeps the best few with a top-N
    heap sort before grouping chunks by message. The HNSW branch orders by the
    index expression, over-fetching so that several chunks of one message still leave `top_k`
    messages; the tail branch scores the scope's unmarked rows (not yet in the graph) exactly, through
    the partial btree on them, and GROUP BY with the caller's ORDER BY merges the two lists by
    distance. The threshold is a HAVING on the best chunk: a WHERE on the distance could be pushed
    into the exact branch and evaluated on rows of another size before the dimensions test. A counted
    search returns the count as a fourth column.
    """
    column = _columns(connection)
    table = connection.ops.quote_name(MessageEmbedding._meta.db_table)
    same_size = f"{column['dimensions']} = {dims}"
    # The HNSW branch orders by the index's expression (in its type) and returns the full-precision
    # distance, so that a halfvec index merges with the exact branches on equal terms.
    kind = index_type(connection)
    index_order = f"({column['vector']}::{kind}({dims})) <=> %s::{kind}({dims})"
    distance = f"({column['vector']}::vector({dims})) <=> %s::vector({dims})"
    limit = top_k * CHUNK_OVERFETCH
    large = exact = count = ""
    params: list[Any] = []
    if exact_max_rows is not None:
        scope_rows = "(SELECT n FROM scope_rows)"
        large = f" AND {scope_rows} > {exact_max_rows}"
        count = f", {scope_rows} AS scope_rows"
        exact = (
            f"scope_rows AS (SELECT COUNT(*) AS n FROM "
            f"(SELECT 1 FROM {table} WHERE {scope} LIMIT {exact_max_rows + 1}) AS capped), "
        )
        params += scope_params
    sql = f"WITH {exact}candidates AS ("
    if exact_max_rows is not None:
        sql += (
            f"(SELECT {column['message']} AS message_id, {column['thread_id']} AS thread_id, "
            f"({column['vector']} <=> %s::vector) AS distance FROM {table} "
            f"WHERE {scope} AND {same_size} AND {scope_rows} <= {exact_max_rows} "
            f"ORDER BY 3 LIMIT {limit}) UNION ALL "
        )
        params += [literal, *scope_params]
    sql += (
        f"(SELECT {column['message']} AS message_id, {column['thread_id']} AS thread_id, "
        f"{distance} AS distance FROM {table} "
        f"WHERE {scope} AND {same_size} AND {column['indexed']}{large} "
        f"ORDER BY {index_order} LIMIT {limit}) "
        f"UNION ALL "
        f"(SELECT {column['message']}, {column['thread_id']}, {distance} FROM {table} "
        f"WHERE {scope} AND {same_size} AND NOT {column['indexed']}{large} "
        f"ORDER BY 3 LIMIT {limit})) "
        f"SELECT message_id, thread_id, MIN(distance) AS distance{count} FROM candidates "
        f"GROUP BY message_id, thread_id"
    )
    params += [literal, *scope_params, literal]  # the HNSW branch (select list, scope, order)
    params += [literal, *scope_params]  # the tail branch
    return sql, params


def _columns(connection: Any) -> dict[str, str]:
    qn = connection.ops.quote_name
    names = ("model", "thread_id", "resource_id", "dimensions", "message", "vector", "indexed")
    return {name: qn(MessageEmbedding._meta.get_field(name).column) for name in names}


def _parse_version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".") if part.isdigit())


def index_tail_merge(connection: Any, model: str, dimensions: int, batch_size: int) -> int:
    """Marks one embedder's unindexed rows as indexed in batches (each batch enters the partial HNSW
    index), under a session advisory lock so that one merge of it runs at a time; returns how many
    rows it marked (0 when another merge holds the lock)."""
    qn = connection.ops.quote_name
    table = qn(MessageEmbedding._meta.db_table)
    lock = _merge_lock(model, dimensions)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [lock])
        if not cursor.fetchone()[0]:
            return 0  # another merge of this embedder is at work
    marked = 0
    try:
        while True:
            with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
                cursor.execute(
                    f"UPDATE {table} SET indexed = true WHERE id IN (SELECT id FROM {table} "
                    "WHERE model = %s AND dimensions = %s AND NOT indexed "
                    "ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED)",
                    [model, int(dimensions), batch_size],
                )
                count = cursor.rowcount
            marked += count
            if count < batch_size:
                return marked
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [lock])


def _merge_lock(model: str, dimensions: int) -> int:
    """The advisory lock key (signed 64-bit) a merge of this embedder holds."""
    digest = hashlib.sha256(f"memproc.index_merge\x00{model}\x00{dimensions}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)
