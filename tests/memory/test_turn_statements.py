"""A turn's first read brings the history window (`selectors.thread_read`), and on PostgreSQL the
sequence UPDATE and the message INSERT are one statement: fewer round trips, the same results."""

from __future__ import annotations

import itertools

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memproc import Memory
from memproc.exceptions import MessageConflict, ValidationError
from memproc.messages import Message
from memproc.models import Message as StoredMessage
from memproc.models import Thread, thread_key
from memproc.selectors import messages_recent, thread_owner_and_messages, thread_read
from memproc.services.messages import messages_insert
from memproc.services.store import DjangoMemoryStore

pytestmark = pytest.mark.django_db
T, R = "t1", "user-1"
KEY = thread_key(R, T)


def _thread_with(memory: Memory, count: int, *, thread_id: str = T) -> list[str]:
    memory.create_thread(resource_id=R, thread_id=thread_id)
    messages = [
        Message.create("user" if i % 2 == 0 else "assistant", f"message {i}", id=f"{thread_id}-m{i}")
        for i in range(count)
    ]
    if messages:
        memory.save_messages(messages, thread_id=thread_id, resource_id=R, embed=False)
    return [m.id for m in messages]


def _ids(messages: list[Message] | None) -> list[str] | None:
    return None if messages is None else [m.id for m in messages]


# --- the combined read ------------------------------------------------------------------------------


def test_thread_read_gives_the_owner_and_the_same_window_as_messages_recent():
    ids = _thread_with(Memory(), 7)
    owner, summary, recent = thread_read(thread_key=KEY, history=4)
    assert owner == (R, "", 7)
    assert summary is None
    assert _ids(recent) == ids[-4:] == _ids(messages_recent(thread_key=KEY, limit=4, last_sequence=7))
    assert [m.sequence for m in recent] == [4, 5, 6, 7]
    assert all(m.thread_id == T and m.resource_id == R for m in recent)


def test_thread_read_of_a_short_thread_gives_all_of_it():
    ids = _thread_with(Memory(), 3)
    assert _ids(thread_read(thread_key=KEY, history=10)[2]) == ids


def test_thread_read_of_an_empty_thread_gives_no_messages():
    Memory().create_thread(resource_id=R, thread_id=T)
    assert thread_read(thread_key=KEY, history=10) == ((R, "", 0), None, [])


def test_thread_read_of_a_missing_thread_is_none():
    assert thread_read(thread_key=KEY, history=10, summary=True) == (None, None, None)


def test_thread_read_without_history_reads_no_message():
    _thread_with(Memory(), 3)
    with CaptureQueriesContext(connection) as queries:
        owner, _, recent = thread_read(thread_key=KEY)
    assert owner == (R, "", 3) and recent is None
    assert "memproc_message" not in queries[0]["sql"]


def test_a_window_with_a_deleted_message_is_none_so_the_caller_asks_again():
    ids = _thread_with(Memory(), 8)
    StoredMessage.objects.filter(id=ids[6]).delete()
    owner, _, recent = thread_read(thread_key=KEY, history=4)
    assert owner == (R, "", 8) and recent is None
    store = DjangoMemoryStore(summaries=False, history=4)
    assert store.thread_owner(thread_id=T, resource_id=R) == (R, "", 8)
    expected = [ids[3], ids[4], ids[5], ids[7]]
    assert _ids(store.messages_recent(thread_id=T, resource_id=R, limit=4, last_sequence=8)) == expected
    assert _ids(Memory(last_messages=4).recall(thread_id=T, resource_id=R)) == expected


_examples = itertools.count()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    count=st.integers(0, 12),
    history=st.integers(0, 8),
    limit=st.integers(0, 14),
    deleted=st.sets(st.integers(0, 11), max_size=4),
)
def test_the_store_answers_every_window_as_the_plain_read_does(count, history, limit, deleted):
    thread_id = f"p{next(_examples)}"  # hypothesis runs every example in the test's one transaction
    ids = _thread_with(Memory(), count, thread_id=thread_id)
    StoredMessage.objects.filter(id__in=[ids[i] for i in deleted if i < count]).delete()
    store = DjangoMemoryStore(summaries=bool(count % 2), history=history)
    owner = store.thread_owner(thread_id=thread_id, resource_id=R)
    assert owner is not None and owner[2] == count
    key = thread_key(R, thread_id)
    assert _ids(
        store.messages_recent(thread_id=thread_id, resource_id=R, limit=limit, last_sequence=count)
    ) == _ids(messages_recent(thread_key=key, limit=limit, last_sequence=count))
    # Read at another last sequence (not this turn's), the store asks the database.
    assert _ids(store.messages_recent(thread_id=thread_id, resource_id=R, limit=limit)) == _ids(
        messages_recent(thread_key=key, limit=limit)
    )


def test_a_turn_reads_its_thread_and_history_in_one_query(make_agent, model, settings):
    settings.MEMPROC = {**settings.MEMPROC, "RECORD_TURNS": False}
    agent = make_agent(memory=Memory(last_messages=3))
    for i in range(4):
        model.add(f"a{i}")
        agent.generate(f"u{i}", thread_id=T, resource_id=R)
    model.add("a4")
    with CaptureQueriesContext(connection) as queries:
        agent.generate("u4", thread_id=T, resource_id=R)
    reads = [q["sql"] for q in queries if q["sql"].startswith("SELECT")]
    assert len(reads) == 1 and "memproc_message" in reads[0]
    assert [m.text for m in model.requests[-1].messages if m.role != "system"] == ["a2", "u3", "a3", "u4"]


def test_a_turn_with_a_longer_echo_than_its_window_reads_again(make_agent, model):
    """Rule 17's echo check may need more rows than the window: the store then asks the database."""
    agent = make_agent(memory=Memory(last_messages=1))
    model.add("a0", "a1")
    agent.generate([{"id": "u0", "role": "user", "content": "u0"}], thread_id=T, resource_id=R)
    stored = list(StoredMessage.objects.filter(thread=KEY).order_by("sequence").values_list("id", "text"))
    echo = [{"id": i, "role": "user" if t == "u0" else "assistant", "content": t} for i, t in stored]
    agent.generate([*echo, {"id": "u1", "role": "user", "content": "u1"}], thread_id=T, resource_id=R)
    assert list(StoredMessage.objects.filter(thread=KEY).values_list("text", flat=True)) == [
        "u0",
        "a0",
        "u1",
        "a1",
    ]
    assert [m.text for m in model.requests[-1].messages if m.role != "system"] == ["a0", "u1"]


# --- the save ---------------------------------------------------------------------------------------


def test_saved_messages_get_the_next_sequences_in_order():
    memory = Memory()
    _thread_with(memory, 3)
    messages_insert(
        thread_id=T, resource_id=R, messages=[Message.create("user", "x"), Message.create("assistant", "y")]
    )
    rows = list(StoredMessage.objects.filter(thread=KEY).values_list("text", "sequence"))
    assert rows[-2:] == [("x", 4), ("y", 5)]
    assert Thread.objects.get(pk=KEY).last_sequence == 5


def test_the_save_is_one_statement_on_postgresql_two_elsewhere():
    _thread_with(Memory(), 1)
    with CaptureQueriesContext(connection) as queries:
        messages_insert(thread_id=T, resource_id=R, messages=[Message.create("user", "x")])
    assert len(queries) == (1 if connection.vendor == "postgresql" else 2)


def test_saving_into_a_missing_thread_is_a_validation_error_and_saves_nothing():
    with pytest.raises(ValidationError, match="does not exist"), transaction.atomic():
        messages_insert(thread_id="nope", resource_id=R, messages=[Message.create("user", "x")])
    assert not StoredMessage.objects.exists()


def test_an_id_saved_meanwhile_is_a_conflict_and_the_sequence_is_untouched():
    ids = _thread_with(Memory(), 2)
    with pytest.raises(MessageConflict), transaction.atomic():
        messages_insert(
            thread_id=T,
            resource_id=R,
            messages=[Message.create("user", "new"), Message.create("user", "again", id=ids[0])],
        )
    assert Thread.objects.get(pk=KEY).last_sequence == 2
    assert StoredMessage.objects.filter(thread=KEY).count() == 2


# --- a save's checks --------------------------------------------------------------------------------


def test_thread_owner_and_messages_reads_both_in_one_query():
    ids = _thread_with(Memory(), 2)
    Memory().create_thread(resource_id=R, thread_id="other")
    with CaptureQueriesContext(connection) as queries:
        owner, rows = thread_owner_and_messages(thread_key=KEY, ids=[ids[1], "unknown"])
    assert len(queries) == 1
    assert owner == (R, "", 2) and rows == [(ids[1], KEY)]
    owner, rows = thread_owner_and_messages(thread_key=thread_key(R, "other"), ids=ids)
    assert owner == (R, "", 0) and sorted(rows) == sorted((i, KEY) for i in ids)
    assert thread_owner_and_messages(thread_key=thread_key(R, "nope"), ids=["unknown"]) == (None, [])
    assert thread_owner_and_messages(thread_key=thread_key(R, "nope"), ids=[ids[0]]) == (
        None,
        [(ids[0], KEY)],
    )
    assert thread_owner_and_messages(thread_key=KEY, ids=[]) == ((R, "", 2), [])


def test_save_messages_checks_thread_and_ids_with_one_query_then_saves():
    memory = Memory()
    ids = _thread_with(memory, 2)
    new = Message.create("user", "fresh")
    with CaptureQueriesContext(connection) as queries:
        saved = memory.save_messages(
            [Message.create("user", "message 0", id=ids[0]), new], thread_id=T, resource_id=R, embed=False
        )
    assert [m.id for m in saved] == [new.id]  # the stored one is skipped
    sql = [q["sql"] for q in queries if not q["sql"].startswith(("SAVEPOINT", "RELEASE"))]
    assert len(sql) == (2 if connection.vendor == "postgresql" else 3), sql
    assert "memproc_thread" in sql[0] and "memproc_message" in sql[0]


def test_save_messages_creates_a_missing_thread_and_refuses_an_id_of_another_thread():
    memory = Memory()
    ids = _thread_with(memory, 1)
    saved = memory.save_messages([Message.create("user", "hi", id="n1")], thread_id="new", resource_id=R)
    assert [m.id for m in saved] == ["n1"]
    assert Thread.objects.filter(pk=thread_key(R, "new")).exists()
    with pytest.raises(MessageConflict, match=ids[0]), transaction.atomic():
        memory.save_messages([Message.create("user", "x", id=ids[0])], thread_id="third", resource_id=R)
    assert not Thread.objects.filter(pk=thread_key(R, "third")).exists()


# --- a turn's whole save as one statement (PostgreSQL, outside a caller's transaction) ---------------


def _writes(queries) -> list[str]:
    return [q["sql"] for q in queries if not q["sql"].startswith("SELECT")]


def _recording_agent(make_agent, model, settings):
    """An agent that records its turns, with one turn saved (so its thread exists)."""
    settings.MEMPROC = {**settings.MEMPROC, "RECORD_TURNS": True}
    agent = make_agent(memory=Memory(last_messages=4))
    model.add("first", "second")
    agent.generate("hello", thread_id=T, resource_id=R)
    return agent


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_turn_saves_its_record_and_messages_in_one_statement(make_agent, model, settings):
    agent = _recording_agent(make_agent, model, settings)
    with CaptureQueriesContext(connection) as queries:
        result = agent.generate("again", thread_id=T, resource_id=R)
    writes = _writes(queries)
    assert len(writes) == 1, writes
    assert "memproc_turnrecord" in writes[0] and "memproc_message" in writes[0]
    assert not any(q["sql"].startswith(("SAVEPOINT", "BEGIN", "COMMIT")) for q in queries)
    rows = list(StoredMessage.objects.filter(thread=KEY).order_by("sequence").values_list("text", "sequence"))
    assert rows == [("hello", 1), ("first", 2), ("again", 3), ("second", 4)]
    from memproc.models import TurnRecord

    record = TurnRecord.objects.get(thread_id=T, message_ids__contains=[result.messages[-1].id])
    assert record.status == "completed"


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_one_statement_save_that_fails_saves_nothing(make_agent, model, settings):
    from memproc.models import TurnRecord

    agent = _recording_agent(make_agent, model, settings)
    records = TurnRecord.objects.count()
    # Another request stores the id this turn's input carries while the turn runs.
    original = model.generate

    def generate_and_race(request):
        Memory().save_messages([Message.create("user", "raced", id="raced")], thread_id="else", resource_id=R)
        return original(request)

    model.generate = generate_and_race
    with pytest.raises(MessageConflict):
        agent.generate([{"id": "raced", "role": "user", "content": "mine"}], thread_id=T, resource_id=R)
    assert Thread.objects.get(pk=KEY).last_sequence == 2
    assert list(StoredMessage.objects.filter(thread=KEY).values_list("text", flat=True)) == ["hello", "first"]
    assert TurnRecord.objects.filter(status="completed").count() == records


@pytest.mark.django_db(transaction=True)
def test_a_save_with_working_memory_keeps_its_transaction(make_agent, model, settings):
    """Writes beyond the messages (here working memory) need the transaction, on every database."""
    from memproc.llm.types import ModelResponse, ToolCall

    agent = make_agent(memory=Memory(last_messages=4, working_memory=True))
    model.add("hi")
    agent.generate("hello", thread_id=T, resource_id=R)
    model.add(
        ModelResponse(tool_calls=[ToolCall("c1", "updateWorkingMemory", {"memory": "# User\n- Name: Ada"})]),
        "noted",
    )
    agent.generate("my name is Ada", thread_id=T, resource_id=R)
    assert "Ada" in Memory(working_memory=True).get_working_memory(thread_id=T, resource_id=R)
    assert StoredMessage.objects.filter(thread=KEY).count() >= 4
