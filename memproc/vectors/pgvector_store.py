"""pgvector search on PostgreSQL: a partial HNSW cosine index per embedder, one statement per search.

This store writes new rows with `indexed = false` (the column's default, for other writers, is
true: their rows enter the graph on insert), so a turn's embeddings pay no HNSW insertion (a graph
search and rewrites of neighbour lists, ~2 ms a vector). They form the embedder's *tail*; once this
process has written `merge_after` of them it enqueues `memproc.index_merge`, which marks the tail
in batches (`embedding_index_merge`), so the graph grows off the turn: on a Celery worker, or, with
inline background work, in a daemon thread of this process. A bulk load with the index
held back (`deferred_index`) writes its rows marked, since the index is built over them afterwards.

No store or search runs DDL: an embedder's index is built by the background job
`memproc.build_index` (sent when a bulk load ends, and by the merge once the embedder has
HNSW_BUILD_MIN_ROWS rows), by `manage.py memproc_index --build`, or by a migration. Until it is valid
the search scores rows exactly (`pgvector_search`).

The index (its name, type and DDL) is in `pgvector_index`, the search statement in `pgvector_search`,
building and merging off the request path in `pgvector_maintenance`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from typing import Any

import numpy as np
from django.db import connections, transaction
from django.utils import timezone

from memproc import background, logs
from memproc.conf import settings
from memproc.db import insert_rows
from memproc.exceptions import ConfigurationError
from memproc.fields import is_postgres
from memproc.models import MessageEmbedding
from memproc.processors.store import VectorHit
from memproc.vectors.base import (
    EMBEDDING_COLUMNS,
    DjangoVectorStore,
    EmbeddingRow,
    SearchFilter,
    embedding_values,
)
from memproc.vectors.pgvector_index import (
    build_index_concurrently,
    deferral_lock,
    forget_versions,
    index_name,
    index_sql,
    index_state,
    index_type,
)
from memproc.vectors.pgvector_search import (
    last_result,
    search_statement,
)

logger = logging.getLogger("memproc.vectors")

# Unmarked rows a process writes for one embedder before it enqueues a merge of the tail.
MERGE_AFTER_ROWS = 500


_deferred: set[tuple[str, str, int]] = set()  # indexes this process holds back for a bulk load
_unmerged: dict[tuple[str, str, int], int] = {}  # rows this process wrote unmarked since its last merge
_running: dict[tuple[Any, ...], threading.Thread] = {}  # inline merges and builds running in threads
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
        sql = self._search(
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
        return [VectorHit(row[0], row[1], 1.0 - float(row[2])) for row in rows]

    def search_sql(self, connection: Any, **search: Any) -> str:
        """The whole search as one SQL string, values inlined by the driver's own quoting; takes
        `search_unit`'s arguments (`query` a normalised array).

        Inlined rather than bound because several statements can share one round trip only without
        bind parameters; inlined constants also let the planner match the partial index predicate.
        A `filter` joins the scope as `message_id IN (admitted messages)`: the HNSW branch's
        iterative scan keeps going until `top_k` admitted rows are found.
        """
        return self._search(connection, **search)

    def _search(self, connection: Any, **search: Any) -> str:
        """`search_statement` with this store's `ef_search` and `exact_max_rows`."""
        ef_search = self.ef_search or int(settings.HNSW_EF_SEARCH)
        exact_max_rows = self.exact_max_rows
        if exact_max_rows is None:
            exact_max_rows = int(settings.EXACT_SEARCH_MAX_ROWS)
        return search_statement(connection, ef_search=ef_search, exact_max_rows=exact_max_rows, **search)

    def ensure_index(
        self, embedder_id: str, dimensions: int, *, using: str | None = None, concurrently: bool = False
    ) -> None:
        """Creates the embedder's HNSW index now unless it exists: for commands, migrations and tests,
        never called by a store or a search (a request runs no DDL).

        `concurrently=True` (outside a transaction) goes through `build_index`; otherwise a plain
        CREATE INDEX, which holds writes back while it builds (fine on a small table or in a
        migration). While a bulk load holds the index back (in any session), nothing is created.
        """
        if concurrently:
            self.build_index(embedder_id, dimensions, analyze=False)
            return
        alias = using or self.db_for_write()
        connection = connections[alias]
        if not is_postgres(connection):
            raise ConfigurationError("PgvectorStore needs PostgreSQL with the pgvector extension")
        key = _index_key(alias, embedder_id, dimensions)
        name = index_name(embedder_id, int(dimensions), key[-1])
        with transaction.atomic(using=alias), connection.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_xact_lock_shared(%s)", [deferral_lock(name)])
            if cursor.fetchone()[0]:
                cursor.execute(index_sql(connection, embedder_id, int(dimensions), kind=key[-1]))

    @contextmanager
    def deferred_index(self, embedder_id: str, dimensions: int) -> Iterator[None]:
        """Holds the embedder's HNSW index back for a bulk load; when the block ends, sends the
        background job `memproc.build_index` and returns, without building.

        pgvector's own advice: inserting a row into an HNSW graph costs milliseconds (it searches the
        graph and rewrites its neighbours' lists), building the graph over the loaded rows costs a
        fraction of that per row. The index is dropped (CONCURRENTLY) and other sessions are kept from
        re-creating it by an advisory lock. The job builds it CONCURRENTLY (writes go on) when the
        embedder has HNSW_BUILD_MIN_ROWS rows, or whatever its size when an index existed before the
        load. Searches meanwhile stay correct: until the index is valid they score rows exactly. Call
        it outside a transaction. The build takes `maintenance_work_mem` (HNSW_BUILD_MEMORY; the
        graph of N d-dimensional rows needs about N * (2d + 200) bytes to build in memory with a
        halfvec index, N * (4d + 200) with a vector one).
        """
        alias = self.db_for_write()
        connection = connections[alias]
        if not is_postgres(connection):
            raise ConfigurationError("PgvectorStore needs PostgreSQL with the pgvector extension")
        if connection.in_atomic_block:
            raise ValueError("deferred_index() must start outside a transaction: it drops an index")
        key = _index_key(alias, embedder_id, dimensions)
        name = index_name(embedder_id, int(dimensions), key[-1])
        qn = connection.ops.quote_name
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_lock(%s)", [deferral_lock(name)])
        existed = False
        try:
            with _lock:
                _deferred.add(key)
            existed = index_state(connection, name)[0] != "none"
            with connection.cursor() as cursor:
                cursor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {qn(name)}")
            yield
        finally:
            with _lock:
                _deferred.discard(key)
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [deferral_lock(name)])
            # After the unlock, so the job finds the lock free; also when the load failed midway (what
            # it stored is there, its index dropped). Outside a transaction it is sent at once.
            kwargs = {"embedder_id": embedder_id, "dimensions": int(dimensions), "using": self.using}
            kwargs["force"] = existed
            inline = partial(run_in_thread, "memproc.build_index", kwargs)
            background.enqueue("memproc.build_index", kwargs=kwargs, inline=inline)

    def build_index(self, embedder_id: str, dimensions: int, *, analyze: bool = True) -> str:
        """Builds the embedder's index now, CONCURRENTLY (see `build_index_concurrently`: "built",
        "valid" or "busy"), then, when it built one, VACUUM ANALYZE for the planner's statistics and
        the visibility map that the capped scope count scans. Call it outside a transaction."""
        alias = self.db_for_write()
        connection = connections[alias]
        if not is_postgres(connection):
            raise ConfigurationError("PgvectorStore needs PostgreSQL with the pgvector extension")
        kind = _index_key(alias, embedder_id, dimensions)[-1]
        done = build_index_concurrently(connection, embedder_id, int(dimensions), kind=kind)
        if done == "built" and analyze:
            with connection.cursor() as cursor:
                cursor.execute(
                    f"VACUUM (ANALYZE) {connection.ops.quote_name(MessageEmbedding._meta.db_table)}"
                )
        return done


def merge_in_thread(kwargs: dict[str, Any]) -> threading.Thread | None:
    """Inline mode's way to run `memproc.index_merge` (see `run_in_thread`)."""
    return run_in_thread("memproc.index_merge", kwargs)


def run_in_thread(task_name: str, kwargs: dict[str, Any]) -> threading.Thread | None:
    """Inline mode's way to run `memproc.index_merge` or `memproc.build_index`: in a thread of this
    process, so the request (or bulk load) that sent it does not wait for graph insertions or the
    build. One thread per task and embedder at a time; a failure is logged, and the next send tries
    again (the rows are still there, and still searched). A build's thread is not a daemon: a process
    that exits (a command that imported) waits for it, so no build is cut off halfway; a merge's is
    (a merge cut off loses nothing)."""
    key = (task_name, kwargs.get("using"), kwargs.get("embedder_id"), kwargs.get("dimensions"))

    def work() -> None:
        try:
            background.run_task_inline(task_name, kwargs)
        except Exception as exc:
            logs.failure(
                logger, "memproc: %s of %s failed; it is tried again later", task_name, key[2], exc=exc
            )
        finally:
            connections.close_all()  # this thread's connections only
            with _lock:
                _running.pop(key, None)

    with _lock:
        if key in _running:
            return None
        name = "memproc-index-build" if task_name == "memproc.build_index" else "memproc-index-merge"
        daemon = task_name != "memproc.build_index"
        thread = _running[key] = threading.Thread(target=work, name=name, daemon=daemon)
    thread.start()
    return thread


def wait_for_inline_work(timeout: float | None = None) -> int:
    """Waits for this process's inline merges and builds: for a script that imported and wants the
    index before it goes on, or a test that must not leave a build running into the next one.
    Returns how many were running."""
    with _lock:
        threads = list(_running.values())
    for thread in threads:
        thread.join(timeout)
    return len(threads)


def forget_indexes() -> None:
    """Forgets the extension versions this process read (for tests that change them)."""
    forget_versions()


def _index_key(alias: str, embedder_id: str, dimensions: int) -> tuple[str, str, int, str]:
    """What this process knows about an index (held back, rows written unmarked) is keyed by this."""
    return (alias, embedder_id, int(dimensions), index_type(connections[alias]))
