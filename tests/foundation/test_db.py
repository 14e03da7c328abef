"""memproc.db.insert_rows: one INSERT for small batches, COPY for large ones on PostgreSQL; the same
rows and the same conflict rules either way."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
import pytest
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from memproc import models
from memproc.db import COPY_MIN_ROWS, insert_rows, one_sqlite_writer
from memproc.messages import Message
from memproc.vectors.base import EMBEDDING_COLUMNS

pytestmark = pytest.mark.django_db
MESSAGE_COLUMNS = (
    "id",
    "public_id",
    "thread",
    "resource_id",
    "role",
    "content",
    "text",
    "token_count",
    "created_at",
    "sequence",
)

SIZES = [3, COPY_MIN_ROWS + 36]  # one INSERT, and COPY on PostgreSQL


def thread(thread_id: str = "t1") -> models.Thread:
    resource, _ = models.Resource.objects.get_or_create(id="r1")
    return models.Thread.objects.create(public_id=thread_id, resource=resource)


def message_rows(count: int, *, thread_id: str = "t1", start: int = 0) -> list[dict]:
    now = timezone.now()
    return [
        {
            "id": models.message_key("r1", f"{thread_id}-m{i}"),  # the key, as messages_insert writes it
            "public_id": f"{thread_id}-m{i}",
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


def in_another_thread(work: Callable[[], object]) -> tuple[threading.Event, Callable[[], None]]:
    """Starts `work` on a thread of its own; returns the event set when it ends, and a function that
    waits for it and raises what it raised."""
    done = threading.Event()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as exc:  # noqa: BLE001 - raised again by finish()
            errors.append(exc)
        finally:
            connection.close()
            done.set()

    worker = threading.Thread(target=run, daemon=True)
    worker.start()

    def finish() -> None:
        worker.join(10)
        assert done.is_set(), "the other thread never ended"
        if errors:
            raise errors[0]

    return done, finish


@contextmanager
def writer_held_elsewhere() -> Iterator[None]:
    """Another thread holds `one_sqlite_writer()` until the block ends."""
    held, leave = threading.Event(), threading.Event()

    def hold() -> None:
        with one_sqlite_writer():
            held.set()
            leave.wait(10)

    _, finish = in_another_thread(hold)
    assert held.wait(5)
    try:
        yield
    finally:
        leave.set()
        finish()


def another_writer() -> tuple[threading.Event, Callable[[], None]]:
    """A writer on another thread: the event is set once it got into `one_sqlite_writer()`."""
    entered = threading.Event()

    def write() -> None:
        with one_sqlite_writer():
            entered.set()

    _, finish = in_another_thread(write)
    return entered, finish


@pytest.mark.django_db(transaction=True)
def test_sqlite_writers_of_one_process_take_turns_outside_a_transaction() -> None:
    with one_sqlite_writer():
        entered, finish = another_writer()
        if connection.vendor == "sqlite":
            assert not entered.wait(0.5)  # it waits for us
        else:
            assert entered.wait(5)
    assert entered.wait(5)
    finish()


@pytest.mark.django_db(transaction=True)
def test_inside_a_callers_transaction_no_writer_lock_is_taken() -> None:
    """The caller's transaction may hold SQLite's lock already; waiting on ours then could stall it."""
    with transaction.atomic(), one_sqlite_writer():
        entered, finish = another_writer()
        assert entered.wait(5)
    finish()


@pytest.mark.django_db(transaction=True)
def test_a_turns_save_waits_for_another_writer_on_sqlite(make_agent, model) -> None:
    from memproc import Memory

    agent = make_agent(memory=Memory(last_messages=4))
    model.add("hello back")
    with writer_held_elsewhere():
        done, finish = in_another_thread(lambda: agent.generate("hello", thread_id="t", resource_id="r"))
        if connection.vendor == "sqlite":
            assert not done.wait(0.5)
            assert not models.Message.objects.exists()
        else:
            assert done.wait(10)
    finish()
    assert list(models.Message.objects.order_by("sequence").values_list("text", flat=True)) == [
        "hello",
        "hello back",
    ]


@pytest.mark.django_db(transaction=True)
def test_embeddings_wait_for_another_writer_on_sqlite() -> None:
    from memproc import Memory

    memory = Memory(semantic_recall=True)
    with writer_held_elsewhere():
        done, finish = in_another_thread(
            lambda: memory.save_messages(
                [Message.create("user", "remember me")], thread_id="t", resource_id="r"
            )
        )
        if connection.vendor == "sqlite":  # the messages are in; their vectors wait for the lock
            assert not done.wait(0.5)
            assert models.Message.objects.count() == 1
            assert not models.MessageEmbedding.objects.exists()
        else:
            assert done.wait(10)
    finish()
    assert models.MessageEmbedding.objects.count() == 1
