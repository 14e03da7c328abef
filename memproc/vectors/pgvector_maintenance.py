"""Index maintenance off the request path: an embedder's index built in the background once it pays
(`memproc.build_index`, `memproc_index --build`), every embedder's index state (`memproc_index
--status`, the admin), and an embedder's tail merged into its graph (`memproc.index_merge`)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from django.db import DatabaseError, connections, transaction
from django.db.models import Count

from memproc.conf import settings
from memproc.exceptions import ConfigurationError
from memproc.fields import is_postgres
from memproc.models import MessageEmbedding
from memproc.vectors.pgvector_index import index_name, index_state, index_type
from memproc.vectors.pgvector_store import PgvectorStore

# Rows marked per transaction when the tail is folded in before a build (no graph to insert into yet).
MERGE_BATCH_ROWS = 5000


@dataclass
class IndexBuild:
    """What `build_indexes` did: index names built, dropped, and (name, error) of builds that failed."""

    built: list[str]
    dropped: list[str]
    failed: list[tuple[str, str]]


@dataclass(frozen=True)
class IndexStatus:
    """One embedder's HNSW index as an operator sees it: `state` is "none", "building", "invalid" or
    "valid" (see `index_state`); `size` in bytes, None without an index."""

    model: str
    dimensions: int
    rows: int
    name: str
    state: str
    size: int | None


def index_status(*, using: str | None = None) -> list[IndexStatus]:
    """Every embedder with stored rows, with its row count and its index (of HNSW_INDEX_TYPE's type).
    One count query over the table, then one catalog query per embedder: for a command or an admin
    page, not for a turn."""
    alias = PgvectorStore(using=using).db_for_read()
    connection = connections[alias]
    if not is_postgres(connection):
        return []
    kind = index_type(connection)
    counts = (
        MessageEmbedding.objects.using(alias)
        .order_by()
        .values_list("model", "dimensions")
        .annotate(rows=Count("id"))
        .order_by("model", "dimensions")
    )
    statuses = []
    for model, dimensions, rows in counts:
        name = index_name(model, dimensions, kind)
        state, size = index_state(connection, name)
        statuses.append(IndexStatus(model, int(dimensions), int(rows), name, state, size))
    return statuses


def index_build_due(
    *,
    embedder_id: str | None = None,
    dimensions: int | None = None,
    using: str | None = None,
    force: bool = False,
) -> dict[str, str]:
    """The background build: for the embedder given (or every one with rows), builds its index when
    it is not valid and the embedder has HNSW_BUILD_MIN_ROWS rows (any number with `force`);
    returns index name -> "built", "valid", "busy" (another session builds it or a bulk load holds
    it) or "small" (below the threshold: searches stay exact, as fast there).

    Idempotent and safe to run twice at once (`build_index_concurrently` holds an advisory lock).
    Before a build the embedder's tail is marked (cheap while no graph exists), so the new graph
    holds every row. Nothing on a database other than PostgreSQL. Call it outside a transaction.
    """
    store = PgvectorStore(using=using)
    alias = store.db_for_write()
    connection = connections[alias]
    if not is_postgres(connection):
        return {}
    kind = index_type(connection)
    if embedder_id is not None and dimensions is not None:
        pairs = [(embedder_id, int(dimensions))]
    else:
        rows = MessageEmbedding.objects.using(alias).order_by()
        if embedder_id is not None:
            rows = rows.filter(model=embedder_id)
        pairs = list(rows.values_list("model", "dimensions").distinct())
    done: dict[str, str] = {}
    for model, size in pairs:
        name = index_name(model, size, kind)
        if index_state(connection, name)[0] == "valid":
            done[name] = "valid"
            continue
        if not force and _rows_below(connection, model, size, int(settings.HNSW_BUILD_MIN_ROWS)):
            done[name] = "small"
            continue
        index_tail_merge(connection, model, size, MERGE_BATCH_ROWS)
        done[name] = store.build_index(model, size)
    return done


def _rows_below(connection: Any, model: str, dimensions: int, limit: int) -> bool:
    """Whether the embedder has fewer than `limit` rows (a count capped at `limit`)."""
    qn = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT COUNT(*) FROM (SELECT 1 FROM {qn(MessageEmbedding._meta.db_table)} "
            "WHERE model = %s AND dimensions = %s LIMIT %s) AS capped",
            [model, int(dimensions), int(limit)],
        )
        return int(cursor.fetchone()[0]) < limit


def build_indexes(*, using: str | None = None) -> IndexBuild:
    """Builds the missing HNSW index of every embedder with stored rows, in HNSW_INDEX_TYPE's type,
    CONCURRENTLY (writes go on), then drops that embedder's index of the other type, if any.

    For deploying indexes now, whatever the embedder's size (`memproc_index --build`,
    `memproc_reindex --build-index`) and for switching HNSW_INDEX_TYPE. An invalid leftover of an
    interrupted build counts as missing: it is dropped and built again. An embedder keeps its old
    index when the new one fails to build (a `vector` index takes at most 2,000 dimensions). An
    index another session is building is reported failed ("busy"). Call it outside a transaction.
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
        if index_state(connection, name)[0] != "valid":
            try:
                result = store.build_index(model, dimensions, analyze=False)
            except DatabaseError as exc:
                done.failed.append((name, str(exc).strip()))
                continue
            if result == "busy":
                done.failed.append((name, "another session is building it (or a bulk load holds it back)"))
                continue
            if result == "built":
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
