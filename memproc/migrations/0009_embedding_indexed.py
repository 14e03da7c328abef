# Issue 22: a new embedding is not inserted into the HNSW graph on the turn. Each embedder's HNSW
# index becomes partial (`... AND indexed`); the pgvector store writes rows with indexed = false and
# the background index merge marks them in batches; searches add an exact scan of the scope's
# unmarked tail, found through the partial btree `memproc_emb_tail`.
#
# Existing rows take the column's default, true, without a table rewrite. On PostgreSQL this
# migration then replaces each embedder's full HNSW index by the partial one (same build options),
# inside the migration's transaction: writes to memproc_messageembedding wait while it builds
# (about as long as the first build took).

import hashlib

from django.db import migrations, models

TABLE = "memproc_messageembedding"


def _name(embedder_id, dimensions, suffix=""):
    # Frozen copies of memproc.vectors.pgvector_index.index_name, before (suffix "") and after.
    digest = hashlib.sha256(f"{embedder_id}\x00{dimensions}{suffix}".encode()).hexdigest()[:16]
    return f"memproc_emb_hnsw_{digest}"


def partial_indexes(apps, schema_editor):
    connection = schema_editor.connection
    if connection.vendor != "postgresql":
        return
    qn = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s "
            "AND indexname LIKE 'memproc\\_emb\\_hnsw\\_%%' AND indexdef NOT LIKE '%%indexed%%'",
            [TABLE],
        )
        old = dict(cursor.fetchall())
        cursor.execute(f"SELECT DISTINCT model, dimensions FROM {qn(TABLE)}")
        pairs = cursor.fetchall()
        for name in old:
            cursor.execute(f"DROP INDEX IF EXISTS {qn(name)}")
        for model, dimensions in pairs:
            definition = old.get(_name(model, dimensions))
            if definition is None:
                continue  # built on the embedder's first use, as before
            new = _name(model, dimensions, "\x00indexed")
            cursor.execute(
                definition.replace(_name(model, dimensions), new, 1).replace(
                    "CREATE INDEX", "CREATE INDEX IF NOT EXISTS", 1
                )
                + " AND indexed"
            )
        cursor.execute(
            f"CREATE INDEX IF NOT EXISTS memproc_emb_tail ON {qn(TABLE)} "
            "(model, resource_id, thread_id) WHERE NOT indexed"
        )


def drop_partial_indexes(apps, schema_editor):
    connection = schema_editor.connection
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = %s "
            "AND (indexname LIKE 'memproc\\_emb\\_hnsw\\_%%' OR indexname = 'memproc_emb_tail')",
            [TABLE],
        )
        for (name,) in cursor.fetchall():
            cursor.execute(f"DROP INDEX IF EXISTS {connection.ops.quote_name(name)}")
    # The full indexes are built again on each embedder's first use.


class Migration(migrations.Migration):
    dependencies = [
        ("memproc", "0008_message_quarantine"),
    ]

    operations = [
        migrations.AddField(
            model_name="messageembedding",
            name="indexed",
            field=models.BooleanField(db_default=True, default=True),
        ),
        migrations.RunPython(partial_indexes, drop_partial_indexes, elidable=False),
    ]
