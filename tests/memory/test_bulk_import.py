"""Memory.bulk_import: messages loaded in bulk are embedded in-process and found by recall afterwards;
on PostgreSQL the HNSW index is held back during the load and built afterwards by a background job
(inline: a thread of this process), searches exact until it is valid."""

from __future__ import annotations

import threading

import pytest
from django.conf import settings
from django.db import connection, connections, transaction
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from memproc import Memory
from memproc.embedders import get_embedder
from memproc.messages import Message
from memproc.models import MessageEmbedding
from memproc.vectors import PgvectorStore
from memproc.vectors.pgvector_index import index_name
from memproc.vectors.pgvector_store import forget_indexes

pytestmark = pytest.mark.django_db(transaction=True)
R = "user-1"


def memory() -> Memory:
    return Memory(last_messages=4, semantic_recall={"top_k": 2, "message_range": 0, "scope": "resource"})


def load(memory: Memory, thread_id: str, texts: list[str]) -> None:
    messages = [Message.create("user" if i % 2 == 0 else "assistant", t) for i, t in enumerate(texts)]
    for start in range(0, len(messages), 50):
        memory.save_messages(messages[start : start + 50], thread_id=thread_id, resource_id=R)


def the_index() -> tuple[bool, bool] | None:
    """(valid, ready) of the default embedder's HNSW index, None when there is none."""
    embedder = get_embedder(None)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT i.indisvalid, i.indisready FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE c.relname = %s",
            [index_name(embedder.id, embedder.dimensions)],
        )
        row = cursor.fetchone()
    return None if row is None else (row[0], row[1])


def join_builds() -> None:
    """Waits for the inline build jobs this process runs in threads."""
    for thread in threading.enumerate():
        if thread.name == "memproc-index-build":
            thread.join(timeout=60)


@pytest.fixture(autouse=True)
def builds_at_any_size(settings):
    """The job builds an index from the first row (the default waits until it pays), and each test
    leaves no build behind."""
    settings.MEMPROC = {**getattr(settings, "MEMPROC", {}), "HNSW_BUILD_MIN_ROWS": 1}
    yield
    join_builds()


def texts(n: int) -> list[str]:
    return [f"imported note {i} about topic {i % 7}" for i in range(n)]


def test_messages_loaded_in_bulk_are_embedded_in_process_even_with_celery_and_recalled() -> None:
    mem = memory()
    with override_settings(MEMPROC={**settings.MEMPROC, "BACKGROUND": "celery"}), mem.bulk_import():
        load(mem, "old-1", texts(120))
        load(mem, "old-2", ["my sister Alice plays the cello in Porto", "noted"])
    assert MessageEmbedding.objects.count() == 122
    found = mem.recall(thread_id="new", resource_id=R, query="who plays the cello?", last_messages=0)
    assert "my sister Alice plays the cello in Porto" in [m.text for m in found]


def test_without_recall_bulk_import_changes_nothing() -> None:
    mem = Memory(last_messages=4)
    with mem.bulk_import():
        load(mem, "t", texts(3))
    assert MessageEmbedding.objects.count() == 0


@pytest.mark.postgres
def test_the_load_returns_without_building_and_a_background_job_builds_the_index() -> None:
    mem = memory()
    load(mem, "before", texts(4))
    assert the_index() is None  # saves and searches never build it
    embedder = get_embedder(None)
    PgvectorStore().ensure_index(embedder.id, embedder.dimensions)
    assert the_index() == (True, True)
    writer = connection.get_new_connection(connection.get_connection_params())
    with mem.bulk_import():
        assert the_index() is None
        with CaptureQueriesContext(connection) as queries:
            load(mem, "during", texts(200))
            # Searches stay correct without the index: exact.
            found = mem.recall(thread_id="x", resource_id=R, query=texts(200)[37], last_messages=0)
        assert texts(200)[37] in [m.text for m in found]
        assert not any("CREATE INDEX" in q["sql"] for q in queries.captured_queries)
        # Another session's open write: a CREATE INDEX CONCURRENTLY cannot finish before it ends.
        writer.execute("LOCK TABLE memproc_messageembedding IN ROW EXCLUSIVE MODE")
    try:
        # bulk_import returned while the build waits: no valid index yet, and recall is exact.
        assert the_index() in (None, (False, False))
        found = mem.recall(thread_id="x", resource_id=R, query=texts(200)[101], last_messages=0)
        assert texts(200)[101] in [m.text for m in found]
    finally:
        writer.rollback()
        writer.close()
    join_builds()
    assert the_index() == (True, True)
    found = mem.recall(thread_id="x", resource_id=R, query=texts(200)[150], last_messages=0)
    assert texts(200)[150] in [m.text for m in found]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT last_vacuum IS NOT NULL, last_analyze IS NOT NULL FROM pg_stat_user_tables "
            "WHERE relname = %s",
            [MessageEmbedding._meta.db_table],
        )
        assert cursor.fetchone() == (True, True)


@pytest.mark.postgres
def test_other_sessions_do_not_recreate_a_held_back_index() -> None:
    mem = memory()
    load(mem, "before", texts(2))
    errors: list[BaseException] = []

    def other_process() -> None:
        try:
            forget_indexes()  # as a process that never saw the index
            load(Memory(last_messages=4, semantic_recall=True), "other", ["written by another session"])
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    with mem.bulk_import():
        worker = threading.Thread(target=other_process)
        worker.start()
        worker.join()
        assert the_index() is None
    assert not errors
    join_builds()
    assert the_index() == (True, True)
    assert MessageEmbedding.objects.filter(thread_id="other").count() == 1


@pytest.mark.postgres
def test_the_index_is_built_even_when_the_load_fails() -> None:
    mem = memory()
    load(mem, "before", texts(2))
    with pytest.raises(RuntimeError, match="import broke"), mem.bulk_import():
        load(mem, "during", texts(10))
        raise RuntimeError("import broke")
    join_builds()
    assert the_index() == (True, True)
    assert MessageEmbedding.objects.count() == 12


@pytest.mark.postgres
def test_a_deferred_index_cannot_start_inside_a_transaction() -> None:
    embedder = get_embedder(None)
    with pytest.raises(ValueError, match="outside a transaction"), transaction.atomic():
        with PgvectorStore().deferred_index(embedder.id, embedder.dimensions):
            pass  # pragma: no cover


@pytest.mark.postgres
def test_the_build_gets_the_configured_memory_and_workers_and_the_session_gets_its_own_back() -> None:
    seen: list[tuple[str, str]] = []

    def spy(execute, sql, params, many, context):
        if "CREATE INDEX CONCURRENTLY" in sql:
            seen.append(session_options())
        return execute(sql, params, many, context)

    before = session_options()
    mem = memory()
    with mem.bulk_import():
        load(mem, "t", texts(3))
    join_builds()
    embedder = get_embedder(None)
    with connection.cursor() as cursor:
        cursor.execute(f"DROP INDEX {index_name(embedder.id, embedder.dimensions)}")
    options = {"HNSW_BUILD_MEMORY": "96MB", "HNSW_BUILD_WORKERS": 1}
    with override_settings(MEMPROC={**settings.MEMPROC, **options}), connection.execute_wrapper(spy):
        assert PgvectorStore().build_index(embedder.id, embedder.dimensions) == "built"
    assert seen == [("96MB", "1")]
    assert session_options() == before != ("96MB", "1")
    assert the_index() == (True, True)


def session_options() -> tuple[str, str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT current_setting('maintenance_work_mem'), current_setting('max_parallel_maintenance_workers')"
        )
        return cursor.fetchone()
