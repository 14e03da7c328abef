"""The pgvector store's HNSW indexes: their names, types and DDL, and the extension's version.

The `vector` column is untyped so embedders of any size share the table; each (embedder, dimensions)
gets `memproc_emb_hnsw_<hash>` on `(vector::halfvec(d)) halfvec_cosine_ops WHERE model = ... AND
dimensions = d AND indexed` (`vector(d)` with HNSW_INDEX_TYPE "vector"; the dimensions guard keeps an
embedder id reused at another size from breaking the cast, and so inserts). It is built off the
request, by `memproc.build_index` or `memproc_index --build`; no store or search creates it. The
HNSW branch orders by the index's type and returns full-precision distances.
"""

from __future__ import annotations

import hashlib
from typing import Any

from memproc.conf import settings
from memproc.exceptions import ConfigurationError
from memproc.models import MessageEmbedding

HALFVEC_SINCE = (0, 7)  # the pgvector release that added halfvec
# The extension's version per database alias, read once: otherwise every store and every search
# would send one more query (a round trip, 0.2–1 ms here) to choose its statement.
_pgvector_versions: dict[str, tuple[int, ...]] = {}


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


def forget_versions() -> None:
    """Forgets the extension versions asked (for tests that fake one)."""
    _pgvector_versions.clear()


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
    column = columns(connection)
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


def columns(connection: Any) -> dict[str, str]:
    """The embeddings table's columns the index and the search name, quoted for `connection`."""
    qn = connection.ops.quote_name
    names = ("model", "thread_id", "resource_id", "dimensions", "message", "vector", "indexed")
    return {name: qn(MessageEmbedding._meta.get_field(name).column) for name in names}


def _parse_version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".") if part.isdigit())


def index_state(connection: Any, name: str) -> tuple[str, int | None]:
    """The state of the index `name` and its size in bytes (None when there is none).

    "none": no such index; "valid": the planner uses it; "building": a CREATE INDEX CONCURRENTLY of
    it is running (it exists, not yet valid, and `pg_stat_progress_create_index` shows its build);
    "invalid": an interrupted build's leftover, which no search uses and the next build replaces.
    """
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT i.indisvalid, pg_relation_size(i.indexrelid), EXISTS (SELECT 1 FROM "
            "pg_catalog.pg_stat_progress_create_index p WHERE p.index_relid = i.indexrelid) "
            "FROM pg_catalog.pg_index i WHERE i.indexrelid = to_regclass(%s)",
            [name],
        )
        row = cursor.fetchone()
    if row is None:
        return "none", None
    valid, size, building = row
    if valid:
        return "valid", int(size)
    return ("building" if building else "invalid"), int(size)


def build_index_concurrently(connection: Any, embedder_id: str, dimensions: int, *, kind: str) -> str:
    """Builds one embedder's HNSW index with CREATE INDEX CONCURRENTLY (writes go on); returns
    "built", "valid" (it already was) or "busy" (another session builds it, or a bulk load holds it
    back: that one sends a build when it ends).

    The session advisory lock of `deferral_lock` keeps two workers from building one index and a
    build from racing a bulk load. An invalid leftover (a build killed midway: CONCURRENTLY leaves
    it behind, and IF NOT EXISTS would keep it) is dropped first. The build runs with
    HNSW_BUILD_MEMORY as `maintenance_work_mem` and HNSW_BUILD_WORKERS as
    `max_parallel_maintenance_workers` (pgvector builds HNSW in parallel since 0.6), both reset after.
    A build that fails drops what it left, so the next call starts over. Call it outside a transaction.
    """
    if connection.in_atomic_block:
        raise ValueError("CREATE INDEX CONCURRENTLY cannot run inside a transaction")
    name = index_name(embedder_id, int(dimensions), kind)
    qn = connection.ops.quote_name
    lock = deferral_lock(name)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [lock])
        if not cursor.fetchone()[0]:
            return "busy"
    try:
        state, _ = index_state(connection, name)
        if state == "valid":
            return "valid"
        sql = index_sql(connection, embedder_id, int(dimensions), concurrently=True, kind=kind)
        with connection.cursor() as cursor:
            if state != "none":
                cursor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {qn(name)}")
            changed = _set_build_options(cursor)
            try:
                cursor.execute(sql)
            except BaseException:
                cursor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {qn(name)}")
                raise
            finally:
                for option in changed:
                    cursor.execute(f"RESET {option}")
        return "built"
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [lock])


def _set_build_options(cursor: Any) -> list[str]:
    """Sets the session's build options from the settings; returns the ones it set (to RESET after)."""
    options = {
        "maintenance_work_mem": settings.HNSW_BUILD_MEMORY,
        "max_parallel_maintenance_workers": settings.HNSW_BUILD_WORKERS,
    }
    changed = []
    for option, value in options.items():
        if value is not None and value != "":
            cursor.execute("SELECT set_config(%s, %s, false)", [option, str(value)])
            changed.append(option)
    return changed
