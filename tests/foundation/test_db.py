"""memproc.db.insert_rows: one INSERT for small batches, COPY for large ones on PostgreSQL; the same
rows and the same conflict rules either way."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from memproc import db, models
from memproc.db import COPY_MIN_ROWS, insert_rows, one_sqlite_writer
from memproc.services.messages import MESSAGE_COLUMNS
from memproc.vectors.base import EMBEDDING_COLUMNS

pytestmark = pytest.mark.django_db

SIZES = [3, COPY_MIN_ROWS + 36]  # one INSERT, and COPY on PostgreSQL


def thread(thread_id: str = "t1") -> models.Thread:
    resource, _ = models.Resource.objects.get_or_create(id="r1")
    return models.Thread.objects.create(public_id=thread_id, resource=resource)


def message_rows(count: int, *, thread_id: str = "t1", start: int = 0) -> list[dict]:
    now = timezone.now()
    return [
        {
            "id": f"{thread_id}-m{i}",
            "thread": models.thread_key("r1", thread_id),  # the message's FK holds the thread's key
            "resource_id": "r1",
            "role": "user" if i % 2 == 0 else "assistant",
            "content": {"parts": [{"type": "text", "text": f"hé {i} \t\\ \n 'quoted'"}], "n": i},
            "text": f"hé {i} \t\\ \n 'quoted'",
            "token_count": None if i % 3 else i,
            "created_at": now,
            "sequence": i + 1,
        }
        for i in range(start, start + count)
    ]


def embedding_rows(messages: list[dict], *, seed: int = 0) -> list[dict]:
    vectors = np.random.default_rng(seed).normal(size=(len(messages), 8)).astype(np.float32)
    return [
        {
            "message": m["id"],
            "thread_id": models.public_thread_id(m["thread"]),  # embeddings hold the public id
            "resource_id": "r1",
            "chunk": 0,
            "model": "e8",
            "dimensions": 8,
            "content_hash": f"h{seed}-{m['id']}",
            "vector": vector,
            "created_at": timezone.now(),
        }
        for m, vector in zip(messages, vectors, strict=True)
    ]


@pytest.mark.parametrize("count", SIZES)
def test_rows_are_stored_exactly_with_escapes_json_and_nulls(count: int) -> None:
    thread()
    rows = message_rows(count)
    insert_rows(models.Message, rows, fields=MESSAGE_COLUMNS)
    stored = {m.id: m for m in models.Message.objects.all()}
    assert len(stored) == count
    for row in rows:
        message = stored[row["id"]]
        assert (message.text, message.content, message.token_count) == (
            row["text"],
            row["content"],
            row["token_count"],
        )
        assert (message.role, message.sequence, message.created_at) == (
            row["role"],
            row["sequence"],
            row["created_at"],
        )


@pytest.mark.parametrize("count", SIZES)
def test_ignore_conflicts_keeps_stored_rows_and_adds_the_new_ones(count: int) -> None:
    thread()
    messages = message_rows(count)
    insert_rows(models.Message, messages, fields=MESSAGE_COLUMNS)
    first = embedding_rows(messages[: count // 2], seed=1)
    insert_rows(models.MessageEmbedding, first, fields=EMBEDDING_COLUMNS, ignore_conflicts=True)
    with transaction.atomic():  # twice in one transaction: the COPY staging table is gone each time
        again = embedding_rows(messages, seed=2)
        insert_rows(models.MessageEmbedding, again, fields=EMBEDDING_COLUMNS, ignore_conflicts=True)
        insert_rows(models.MessageEmbedding, again, fields=EMBEDDING_COLUMNS, ignore_conflicts=True)
    stored = {e.message_id: e for e in models.MessageEmbedding.objects.all()}
    assert len(stored) == count
    for row in first + again[count // 2 :]:
        assert stored[row["message"]].content_hash == row["content_hash"]
        assert np.allclose(stored[row["message"]].vector, row["vector"], atol=1e-6)


@pytest.mark.parametrize("count", SIZES)
def test_a_conflict_without_ignore_raises_and_stores_nothing_of_the_batch(count: int) -> None:
    thread()
    insert_rows(models.Message, message_rows(1), fields=MESSAGE_COLUMNS)
    with pytest.raises(IntegrityError), transaction.atomic():
        insert_rows(models.Message, message_rows(count), fields=MESSAGE_COLUMNS)
    assert models.Message.objects.count() == 1


@pytest.mark.postgres
def test_large_batches_go_through_copy_on_postgresql() -> None:
    thread()
    rows = message_rows(COPY_MIN_ROWS)
    with CaptureQueriesContext(connection) as queries:
        insert_rows(models.Message, rows, fields=MESSAGE_COLUMNS)
    assert not any(q["sql"].startswith("INSERT") for q in queries.captured_queries)
    assert models.Message.objects.count() == COPY_MIN_ROWS


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_role_without_temporary_tables_still_skips_conflicts_with_plain_inserts() -> None:
    thread()
    messages = message_rows(COPY_MIN_ROWS)
    insert_rows(models.Message, messages, fields=MESSAGE_COLUMNS)
    first = embedding_rows(messages[:10], seed=1)
    insert_rows(models.MessageEmbedding, first, fields=EMBEDDING_COLUMNS, ignore_conflicts=True)
    database = connection.ops.quote_name(connection.settings_dict["NAME"])
    with connection.cursor() as cursor:
        cursor.execute("CREATE ROLE memproc_no_temp")
        cursor.execute("GRANT ALL ON ALL TABLES IN SCHEMA public TO memproc_no_temp")
        cursor.execute("GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO memproc_no_temp")
        cursor.execute(f"REVOKE TEMPORARY ON DATABASE {database} FROM PUBLIC")
    # PostgreSQL checks the privilege when a session first creates a temporary table: a new session.
    connection.close()
    try:
        with connection.cursor() as cursor:
            cursor.execute("SET ROLE memproc_no_temp")
        rows = embedding_rows(messages, seed=2)
        insert_rows(models.MessageEmbedding, rows, fields=EMBEDDING_COLUMNS, ignore_conflicts=True)
        assert connection.memproc_no_temporary_tables
    finally:
        connection.close()
        with connection.cursor() as cursor:
            cursor.execute(f"GRANT TEMPORARY ON DATABASE {database} TO PUBLIC")
            cursor.execute("DROP OWNED BY memproc_no_temp")
            cursor.execute("DROP ROLE memproc_no_temp")
    stored = dict(models.MessageEmbedding.objects.values_list("message_id", "content_hash"))
    assert len(stored) == COPY_MIN_ROWS
    assert all(stored[row["message"]] == row["content_hash"] for row in first + rows[10:])


# --- one_sqlite_writer --------------------------------------------------------------------------------


def _taken_elsewhere() -> bool:
    """Whether another thread finds the writer lock held."""
    result: list[bool] = []

    def probe() -> None:
        got = db._sqlite_writer.acquire(blocking=False)
        if got:
            db._sqlite_writer.release()
        result.append(not got)

    worker = threading.Thread(target=probe)
    worker.start()
    worker.join(5)
    return result[0]


@pytest.mark.django_db(transaction=True)
def test_sqlite_writers_of_one_process_take_turns_outside_a_transaction() -> None:
    with one_sqlite_writer():
        assert _taken_elsewhere() is (connection.vendor == "sqlite")
    assert not _taken_elsewhere()


@pytest.mark.django_db(transaction=True)
def test_inside_a_callers_transaction_no_writer_lock_is_taken() -> None:
    """The caller's transaction may hold SQLite's lock already; waiting on ours then could stall it."""
    with transaction.atomic(), one_sqlite_writer():
        assert not _taken_elsewhere()


@pytest.mark.django_db(transaction=True)
def test_a_turns_save_and_its_embeddings_take_the_writer_lock_on_sqlite(
    make_agent, model, monkeypatch
) -> None:
    from memproc import Memory

    lock = db._sqlite_writer
    entered: list[bool] = []

    class Counting:
        def __enter__(self) -> None:
            entered.append(True)
            lock.acquire()

        def __exit__(self, *exc: object) -> None:
            lock.release()

    monkeypatch.setattr(db, "_sqlite_writer", Counting())
    agent = make_agent(memory=Memory(last_messages=4, semantic_recall=True))
    model.add("hello back")
    agent.generate("hello", thread_id="t", resource_id="r")
    # The save, then the embeddings of its two messages after commit.
    assert len(entered) == (2 if connection.vendor == "sqlite" else 0)
