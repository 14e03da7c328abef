"""Issue 22: new embeddings stay out of the HNSW graph (the tail) until the background merge marks them."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from django.core.management import call_command
from django.db import connection, connections, transaction

from memproc.models import MessageEmbedding
from memproc.services.reindex import embedding_index_merge
from memproc.vectors import NumpyVectorStore, PgvectorStore, pgvector_store
from memproc.vectors.pgvector_index import index_name
from tests.vectors.helpers import clustered, explain, rows_for

pytestmark = pytest.mark.django_db

M = "m16"


@pytest.fixture(autouse=True)
def fresh_counts():
    """Each test counts its own unmarked rows (the counts are per process)."""
    pgvector_store._unmerged.clear()
    yield
    pgvector_store._unmerged.clear()


def tail(model: str = M) -> int:
    return MessageEmbedding.objects.filter(model=model, indexed=False).count()


def test_the_merge_does_nothing_on_sqlite(on_postgres) -> None:
    if on_postgres:
        pytest.skip("SQLite only")
    assert embedding_index_merge() == 0


@pytest.mark.postgres
def test_the_index_holds_only_marked_rows_and_new_rows_are_written_unmarked(make_messages) -> None:
    messages = make_messages("t1", 4)
    store = PgvectorStore(merge_after=None)
    store.ensure_index(M, 16)
    store.store(rows_for(messages[:2], clustered(2), model=M))
    NumpyVectorStore().store(rows_for(messages[2:], clustered(2, seed=1), model=M))
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = %s", [index_name(M, 16)])
        assert cursor.fetchone()[0].endswith("AND indexed)")
    marked = dict(MessageEmbedding.objects.values_list("message_id", "indexed"))
    # The pgvector store skips the graph; any other writer gets the column's default, as before.
    assert marked == {
        messages[0].id: False,
        messages[1].id: False,
        messages[2].id: True,
        messages[3].id: True,
    }


@pytest.mark.postgres
def test_a_message_embedded_a_moment_ago_is_found_before_the_merge(make_messages) -> None:
    old = make_messages("old", 3000)
    vectors = clustered(3001)
    store = PgvectorStore(exact_max_rows=0, merge_after=None)  # always the HNSW branch
    store.ensure_index(M, 16)
    NumpyVectorStore().store(rows_for(old, vectors[:3000], model=M))  # marked: in the graph
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE memproc_messageembedding")
    new = make_messages("new", 1)
    store.store(rows_for(new, vectors[3000:], model=M))
    assert tail() == 1
    sql = store.search_sql(
        connection, embedder_id=M, query=vectors[3000] / np.linalg.norm(vectors[3000]), top_k=5
    )
    plan = explain(sql)
    assert index_name(M, 16) in plan and "memproc_emb_tail" in plan
    for scope in ({}, {"resource_id": "r1"}, {"thread_id": "new"}):
        hits = store.search(embedder_id=M, vector=vectors[3000], top_k=5, **scope)
        assert hits[0].message_id == new[0].id
        assert hits[0].score == pytest.approx(1.0, abs=1e-5)
    assert embedding_index_merge(embedder_id=M) == 1
    assert tail() == 0
    assert store.search(embedder_id=M, vector=vectors[3000], top_k=5)[0].message_id == new[0].id


@pytest.mark.postgres
def test_the_merge_is_idempotent_and_goes_in_batches(make_messages) -> None:
    store = PgvectorStore(merge_after=None)
    store.store(rows_for(make_messages("t1", 25), clustered(25), model=M))
    store.store(rows_for(make_messages("t2", 5), clustered(5, dims=8), model="m8"))
    assert embedding_index_merge(embedder_id=M, batch_size=10) == 25
    assert tail(M) == 0 and tail("m8") == 5
    assert embedding_index_merge(embedder_id=M, batch_size=10) == 0
    assert embedding_index_merge() == 5
    assert embedding_index_merge() == 0


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_merges_mark_each_row_once_and_skip_rows_a_writer_holds(make_messages) -> None:
    messages = make_messages("t1", 400)
    PgvectorStore(merge_after=None).store(rows_for(messages, clustered(400), model=M))
    held = MessageEmbedding.objects.get(message_id=messages[0].id).pk
    results: list[int] = []
    errors: list[BaseException] = []
    start = threading.Barrier(3)

    def merge() -> None:
        try:
            start.wait()
            results.append(embedding_index_merge(embedder_id=M, batch_size=50))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    workers = [threading.Thread(target=merge) for _ in range(3)]
    with transaction.atomic():
        # A writer holds one row: merges skip it instead of waiting.
        MessageEmbedding.objects.select_for_update().get(pk=held)
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(timeout=60)
    assert not errors
    assert sum(results) == 399  # each row once: the advisory lock lets one merge work, the others leave
    assert list(MessageEmbedding.objects.filter(indexed=False).values_list("pk", flat=True)) == [held]
    assert embedding_index_merge(embedder_id=M) == 1
    assert tail() == 0


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_the_store_merges_its_tail_off_the_request_once_it_is_long_enough(make_messages, monkeypatch) -> None:
    started: list[threading.Thread] = []
    original = pgvector_store.merge_in_thread

    def spy(kwargs):
        thread = original(kwargs)
        started.append(thread)
        return thread

    monkeypatch.setattr(pgvector_store, "merge_in_thread", spy)
    messages = make_messages("t1", 5)
    store = PgvectorStore(merge_after=3)
    store.store(rows_for(messages[:2], clustered(2), model=M))
    assert tail() == 2 and not started
    store.store(rows_for(messages[2:], clustered(3, seed=2), model=M))
    assert len(started) == 1  # one merge for the embedder, in a thread: store() did not wait for it
    started[0].join(timeout=30)
    assert tail() == 0


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_bulk_load_writes_its_rows_marked(make_messages) -> None:
    messages = make_messages("t1", 20)
    store = PgvectorStore(merge_after=None)
    with store.deferred_index(M, 16):
        store.store(rows_for(messages, clustered(20), model=M))
    assert tail() == 0
    store.store(rows_for(make_messages("t2", 1), clustered(1, seed=3), model=M))
    assert tail() == 1


@pytest.mark.postgres
def test_recall_at_10_against_exact_with_a_tail(make_messages) -> None:
    """3,000 rows in the graph and 300 in the tail: the merged lists keep recall@10 at or above 0.95."""
    messages = make_messages("a", 3000) + make_messages("b", 300, resource_id="r2")
    vectors = clustered(3300, seed=5)
    store = PgvectorStore(exact_max_rows=0, merge_after=None)
    store.ensure_index(M, 16)
    NumpyVectorStore().store(rows_for(messages[:3000], vectors[:3000], model=M))
    store.store(rows_for(messages[3000:], vectors[3000:], model=M))
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE memproc_messageembedding")
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    rng = np.random.default_rng(7)
    found = 0
    queries = rng.integers(0, 3300, 40)
    for q in queries:
        query = unit[q] + 0.1 * rng.normal(size=16).astype(np.float32)
        query /= np.linalg.norm(query)
        exact = {messages[i].id for i in np.argsort(-(unit @ query))[:10]}
        hits = store.search(embedder_id=M, vector=query, top_k=10)
        found += len(exact & {h.message_id for h in hits})
    assert found / (10 * len(queries)) >= 0.95


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_the_command_merges_the_tail(make_messages, capsys) -> None:
    PgvectorStore(merge_after=None).store(rows_for(make_messages("t1", 3), clustered(3), model=M))
    call_command("memproc_reindex", "--merge-index", "--batch-size", "2")
    assert "Marked 3 embedding(s)" in capsys.readouterr().out
    assert tail() == 0


@pytest.mark.postgres
def test_a_bulk_insert_copies_vectors_in_binary_exactly(make_messages) -> None:
    messages = make_messages("t1", 100)  # past COPY_MIN_ROWS: COPY in the binary format
    vectors = clustered(100, dims=384, seed=4)
    PgvectorStore(merge_after=None).store(rows_for(messages, vectors, model="m384"))
    stored = dict(MessageEmbedding.objects.filter(model="m384").values_list("message_id", "vector"))
    for message, vector in zip(messages, vectors, strict=True):
        np.testing.assert_array_equal(stored[message.id], vector)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_migration_0009_replaces_a_full_index_by_the_partial_one(make_messages) -> None:
    import hashlib
    import importlib
    from types import SimpleNamespace

    migration = importlib.import_module("memproc.migrations.0009_embedding_indexed")
    NumpyVectorStore().store(rows_for(make_messages("t1", 3), clustered(3), model=M))
    old = "memproc_emb_hnsw_" + hashlib.sha256(f"{M}\x0016".encode()).hexdigest()[:16]
    with connection.cursor() as cursor:
        for kind in ("vector", "halfvec"):
            cursor.execute(f"DROP INDEX IF EXISTS {index_name(M, 16, kind)}")
        cursor.execute(
            f"CREATE INDEX {old} ON memproc_messageembedding USING hnsw ((vector::vector(16)) vector_cosine_ops) "
            f"WITH (m = 8, ef_construction = 32) WHERE model = '{M}' AND dimensions = 16"
        )
        migration.partial_indexes(None, SimpleNamespace(connection=connection))
        cursor.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'memproc_messageembedding'"
        )
        indexes = dict(cursor.fetchall())
    assert old not in indexes
    partial = indexes[index_name(M, 16, "vector")]  # 0014 converts it to the configured type
    assert "m='8'" in partial and partial.endswith("AND indexed)")
    assert "memproc_emb_tail" in indexes


@pytest.mark.postgres
def test_with_celery_the_merge_goes_through_the_outbox(make_messages, settings) -> None:
    from memproc.models import OutboxJob

    settings.MEMPROC = {**getattr(settings, "MEMPROC", {}), "BACKGROUND": "celery"}
    PgvectorStore(merge_after=2).store(rows_for(make_messages("t1", 2), clustered(2), model=M))
    job = OutboxJob.objects.get()
    assert job.task == "memproc.index_merge"
    assert job.kwargs == {"embedder_id": M, "dimensions": 16, "using": None}
