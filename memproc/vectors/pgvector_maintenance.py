"""Index maintenance off the request path: every embedder's index built ahead (`memproc_reindex`),
and an embedder's tail merged into its graph (`memproc.index_merge`)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from django.db import DatabaseError, connections, transaction

from memproc.exceptions import ConfigurationError
from memproc.fields import is_postgres
from memproc.models import MessageEmbedding
from memproc.vectors.pgvector_index import index_name, index_type
from memproc.vectors.pgvector_store import PgvectorStore


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
