"""A turn's reads and saves: the thread and its history window read together (`selectors.thread_read`)
give what the plain reads give; a save stores its rows in order, or nothing when it fails; a turn's
queries stay within a fixed bound whatever the history length."""

from __future__ import annotations

import pytest
from django.db import OperationalError, connection, transaction
from django.test.utils import CaptureQueriesContext

from memproc import Memory
from memproc.exceptions import MessageConflict, ValidationError
from memproc.messages import Message
from memproc.models import Message as StoredMessage
from memproc.models import Thread, TurnRecord, thread_key
from memproc.selectors.messages import messages_recent
from memproc.selectors.threads import thread_read
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
    owner, summary, recent, _ = thread_read(thread_key=KEY, history=4)
    assert owner == (R, "", 7)
    assert summary is None
    assert _ids(recent) == ids[-4:] == _ids(messages_recent(thread_key=KEY, limit=4))
    assert [m.sequence for m in recent] == [4, 5, 6, 7]
    assert all(m.thread_id == T and m.resource_id == R for m in recent)


def test_thread_read_of_a_short_thread_gives_all_of_it():
    ids = _thread_with(Memory(), 3)
    assert _ids(thread_read(thread_key=KEY, history=10)[2]) == ids


def test_thread_read_of_an_empty_thread_gives_no_messages():
    Memory().create_thread(resource_id=R, thread_id=T)
    assert thread_read(thread_key=KEY, history=10) == ((R, "", 0), None, [], None)


def test_thread_read_of_a_missing_thread_is_none():
    assert thread_read(thread_key=KEY, history=10, summary=True) == (None, None, None, None)


def test_thread_read_without_history_gives_the_owner_and_no_messages(django_assert_max_num_queries):
    _thread_with(Memory(), 3)
    with django_assert_max_num_queries(1):
        owner, _, recent, memory = thread_read(thread_key=KEY)
    assert owner == (R, "", 3) and recent is None and memory is None


def test_a_window_with_a_deleted_message_reaches_past_the_gap():
    ids = _thread_with(Memory(), 8)
    StoredMessage.objects.filter(public_id=ids[6]).delete()
    expected = [ids[3], ids[4], ids[5], ids[7]]
    owner, _, recent, _ = thread_read(thread_key=KEY, history=4)
    assert owner == (R, "", 8) and _ids(recent) == expected
    store = DjangoMemoryStore(summaries=False)
    assert store.thread_owner(thread_id=T, resource_id=R) == (R, "", 8)
    assert _ids(store.messages_recent(thread_id=T, resource_id=R, limit=4)) == expected
    assert _ids(Memory(last_messages=4).recall(thread_id=T, resource_id=R)) == expected


# Round trips of a turn on a thread that exists, in a caller's transaction (savepoints included):
# the thread read, its history; savepoint; the sequence UPDATE (a swap of the value the turn read),
# the message INSERT, the record INSERT; release.
TURN_QUERIES = {"postgresql": 7, "sqlite": 7}


@pytest.mark.parametrize("record_turns", [False, True])
def test_a_turns_queries_are_bounded_whatever_the_history_length(make_agent, model, settings, record_turns):
    settings.MEMPROC = {**settings.MEMPROC, "RECORD_TURNS": record_turns}
    agent = make_agent(memory=Memory(last_messages=3))
    counts = []
    for i in range(25):
        model.add(f"a{i}")
        with CaptureQueriesContext(connection) as queries:
            agent.generate(f"u{i}", thread_id=T, resource_id=R)
        counts.append(len(queries))
    assert max(counts[1:]) <= TURN_QUERIES[connection.vendor], counts
    assert counts[-1] <= counts[1], counts  # 48 stored messages cost no more than 2
    assert [m.text for m in model.requests[-1].messages if m.role != "system"] == [
        "a22",
        "u23",
        "a23",
        "u24",
    ]


def test_a_turn_with_a_longer_echo_than_its_window_reads_again(make_agent, model):
    """Rule 17's echo check may need more rows than the window: the store then asks the database."""
    agent = make_agent(memory=Memory(last_messages=1))
    model.add("a0", "a1")
    agent.generate([{"id": "u0", "role": "user", "content": "u0"}], thread_id=T, resource_id=R)
    stored = list(
        StoredMessage.objects.filter(thread=KEY).order_by("sequence").values_list("public_id", "text")
    )
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


def test_the_save_takes_at_most_three_queries(django_assert_max_num_queries):
    """The sequence UPDATE (the thread's lock), its read, one INSERT of the rows."""
    _thread_with(Memory(), 1)
    with django_assert_max_num_queries(3):
        messages_insert(thread_id=T, resource_id=R, messages=[Message.create("user", "x")])
    assert list(StoredMessage.objects.filter(thread=KEY).values_list("text", "sequence")) == [
        ("message 0", 1),
        ("x", 2),
    ]


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


def test_save_messages_skips_stored_ids_within_a_bound_of_queries(django_assert_max_num_queries):
    memory = Memory()
    ids = _thread_with(memory, 2)
    new = Message.create("user", "fresh")
    # The check of the thread, of the ids, the save; and a savepoint around them.
    with django_assert_max_num_queries(7):
        saved = memory.save_messages(
            [Message.create("user", "message 0", id=ids[0]), new], thread_id=T, resource_id=R, embed=False
        )
    assert [m.id for m in saved] == [new.id]  # the stored one is skipped
    assert list(
        StoredMessage.objects.filter(thread=KEY).order_by("sequence").values_list("public_id", "sequence")
    ) == [
        (ids[0], 1),
        (ids[1], 2),
        (new.id, 3),
    ]


def test_save_messages_creates_a_missing_thread_and_refuses_an_id_of_another_thread():
    memory = Memory()
    ids = _thread_with(memory, 1)
    saved = memory.save_messages([Message.create("user", "hi", id="n1")], thread_id="new", resource_id=R)
    assert [m.id for m in saved] == ["n1"]
    assert Thread.objects.filter(pk=thread_key(R, "new")).exists()
    with pytest.raises(MessageConflict, match=ids[0]), transaction.atomic():
        memory.save_messages([Message.create("user", "x", id=ids[0])], thread_id="third", resource_id=R)
    assert not Thread.objects.filter(pk=thread_key(R, "third")).exists()


# --- a turn's save outside a caller's transaction ---------------------------------------------------


def _recording_agent(make_agent, model, settings):
    """An agent that records its turns, with one turn saved (so its thread exists)."""
    settings.MEMPROC = {**settings.MEMPROC, "RECORD_TURNS": True}
    agent = make_agent(memory=Memory(last_messages=4))
    model.add("first", "second")
    agent.generate("hello", thread_id=T, resource_id=R)
    return agent


# Round trips of a recorded turn on a thread that exists, outside a transaction: the thread read with
# its history; BEGIN, the sequence UPDATE, the message INSERT, the record INSERT, COMMIT.
COMMITTED_TURN_QUERIES = {"postgresql": 6, "sqlite": 6}


@pytest.mark.django_db(transaction=True)
def test_a_turn_saves_its_record_and_messages_within_a_bound_of_queries(make_agent, model, settings):
    agent = _recording_agent(make_agent, model, settings)
    with CaptureQueriesContext(connection) as queries:
        result = agent.generate("again", thread_id=T, resource_id=R)
    assert len(queries) <= COMMITTED_TURN_QUERIES[connection.vendor], [q["sql"][:80] for q in queries]
    rows = list(StoredMessage.objects.filter(thread=KEY).order_by("sequence").values_list("text", "sequence"))
    assert rows == [("hello", 1), ("first", 2), ("again", 3), ("second", 4)]
    assert Thread.objects.get(pk=KEY).last_sequence == 4
    records = TurnRecord.objects.filter(thread_id=T, resource_id=R).order_by("started_at")
    assert [(r.status, r.message_ids) for r in records][-1] == ("completed", [m.id for m in result.messages])


@pytest.mark.django_db(transaction=True)
def test_a_turn_whose_save_meets_a_conflict_saves_nothing(make_agent, model, settings):
    agent = _recording_agent(make_agent, model, settings)
    records = TurnRecord.objects.filter(status="completed").count()
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
def test_a_turn_whose_message_write_fails_in_the_database_saves_nothing(make_agent, model, settings):
    agent = _recording_agent(make_agent, model, settings)
    records = TurnRecord.objects.filter(status="completed").count()

    def failing_message_writes(execute, sql, params, many, context):
        if "memproc_message" in sql and not sql.lstrip().upper().startswith("SELECT"):
            raise OperationalError("disk I/O error")
        return execute(sql, params, many, context)

    with connection.execute_wrapper(failing_message_writes), pytest.raises(OperationalError):
        agent.generate("again", thread_id=T, resource_id=R)
    assert Thread.objects.get(pk=KEY).last_sequence == 2
    assert list(StoredMessage.objects.filter(thread=KEY).values_list("text", flat=True)) == ["hello", "first"]
    assert TurnRecord.objects.filter(status="completed").count() == records
    model.add("saved")
    agent.generate("again", thread_id=T, resource_id=R)  # the thread is usable afterwards
    assert list(
        StoredMessage.objects.filter(thread=KEY).order_by("sequence").values_list("text", flat=True)
    ) == [
        "hello",
        "first",
        "again",
        "saved",
    ]


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


def test_a_message_saved_while_the_model_answers_goes_before_the_turns_own(make_agent):
    """The turn swaps the last sequence it read for its own; another writer moved it meanwhile, so the
    swap fails and the turn's messages go after that writer's, numbered without a gap or a clash."""
    from memproc.testing import ScriptedModel

    memory = Memory(last_messages=10)
    _thread_with(memory, 2)

    def answer(request):
        memory.save_messages([Message.create("user", "meanwhile")], thread_id=T, resource_id=R, embed=False)
        return "answer"

    make_agent(model=ScriptedModel([answer]), memory=memory).generate("ask", thread_id=T, resource_id=R)
    rows = StoredMessage.objects.filter(thread=KEY).order_by("sequence").values_list("text", "sequence")
    assert list(rows) == [("message 0", 1), ("message 1", 2), ("meanwhile", 3), ("ask", 4), ("answer", 5)]
    assert Thread.objects.get(pk=KEY).last_sequence == 5


def test_a_turn_with_the_threads_working_memory_reads_the_thread_row_once(make_agent, model):
    """The working memory comes with the turn's first read; the model sees it, and a change the model
    makes is written against it without reading the row again."""
    from memproc.llm.types import ModelResponse, ToolCall
    from memproc.services.working_memory import working_memory_update

    agent = make_agent(memory=Memory(last_messages=4, working_memory={"scope": "thread"}))
    model.add("first")
    agent.generate("hello", thread_id=T, resource_id=R)
    working_memory_update(scope="thread", key=KEY, value="# Notes\n- likes tea", source="code")
    model.add(ModelResponse(tool_calls=[ToolCall("w1", "updateWorkingMemory", {"memory": "# Notes\n- tea"})]))
    model.add("noted")
    with CaptureQueriesContext(connection) as queries:
        agent.generate("again", thread_id=T, resource_id=R)
    thread_reads = [
        q["sql"] for q in queries if q["sql"].startswith("SELECT") and '"memproc_thread"' in q["sql"]
    ]
    assert len(thread_reads) == 1, thread_reads  # the thread's row joined to its history window
    assert "- likes tea" in next(m.text for m in model.requests[-2].messages if m.id == "working-memory")
    assert Thread.objects.get(pk=KEY).working_memory == "# Notes\n- tea"
