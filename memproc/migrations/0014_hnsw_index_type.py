# Issue 22: HNSW indexes hold halfvec by default (MEMPROC["HNSW_INDEX_TYPE"]): an index 43% smaller,
# faster to build and to search at the same recall (bench/RESULTS.md). On PostgreSQL each embedder's
# existing HNSW index is built again in the configured type, CONCURRENTLY (writes go on while it
# builds, which takes about as long as the first build did), and the index of the other type is
# then dropped, CONCURRENTLY. Rows are not touched. A site that sets "vector" keeps its indexes;
# setting it later and migrating back converts them again.

import hashlib

from django.conf import settings
from django.db import migrations

TABLE = "memproc_messageembedding"
TYPES = ("vector", "halfvec")


def _name(embedder_id, dimensions, kind):
    # A frozen copy of memproc.vectors.pgvector_index.index_name.
    suffix = "" if kind == "vector" else f"\x00{kind}"
    digest = hashlib.sha256(f"{embedder_id}\x00{dimensions}\x00indexed{suffix}".encode()).hexdigest()[:16]
    return f"memproc_emb_hnsw_{digest}"


def convert(schema_editor, kind):
    connection = schema_editor.connection
    if connection.vendor != "postgresql" or kind not in TYPES:
        return  # an unknown type is the system check's to report (memproc.E019)
    other = TYPES[1 - TYPES.index(kind)]
    qn = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        row = cursor.fetchone()
        version = tuple(int(part) for part in row[0].split(".") if part.isdigit()) if row else ()
        if kind == "halfvec" and version < (0, 7):
            return  # pgvector before 0.7 has no halfvec: memproc keeps vector indexes there
        cursor.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s "
            "AND indexname LIKE 'memproc\\_emb\\_hnsw\\_%%'",
            [TABLE],
        )
        existing = dict(cursor.fetchall())
        if not existing:
            return
        cursor.execute(f"SELECT DISTINCT model, dimensions FROM {qn(TABLE)}")
        for model, dimensions in cursor.fetchall():
            old, new = _name(model, dimensions, other), _name(model, dimensions, kind)
            if old not in existing or new in existing:
                continue  # never built (it is on the embedder's first use), or converted already
            definition = (
                existing[old]
                .replace(old, new, 1)
                .replace("CREATE INDEX", "CREATE INDEX CONCURRENTLY IF NOT EXISTS", 1)
                .replace(f"::{other}({dimensions})", f"::{kind}({dimensions})")
                .replace(f"{other}_cosine_ops", f"{kind}_cosine_ops")
            )
            try:
                cursor.execute(definition)
            except Exception:
                cursor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {qn(new)}")  # an invalid leftover
                raise
            cursor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {qn(old)}")


def forwards(apps, schema_editor):
    convert(schema_editor, (getattr(settings, "MEMPROC", None) or {}).get("HNSW_INDEX_TYPE", "halfvec"))


def backwards(apps, schema_editor):
    convert(schema_editor, "vector")


class Migration(migrations.Migration):
    atomic = False  # CREATE / DROP INDEX CONCURRENTLY cannot run in a transaction

    dependencies = [
        ("memproc", "0013_thread_key_field"),
    ]

    operations = [
        migrations.RunPython(forwards, backwards, elidable=False),
    ]
