"""Memory processors against the in-memory store: no database (they reach storage only through
`ctx.store`, and record writes on the processor-layer `Turn`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from memproc.messages import Message, TextPart, ToolCallPart, ToolResultPart
from memproc.processors.base import ProcessorContext
from memproc.processors.conversation import Conversation
from memproc.processors.message_history import MessageHistory
from memproc.processors.runner import ProcessorRunner
from memproc.processors.semantic_recall import SemanticRecall
from memproc.processors.store import InMemoryStore
from memproc.processors.turn import Turn
from memproc.processors.working_memory import WorkingMemory
from memproc.testing import HashEmbedder

T, R = "t-mem", "r-mem"
START = datetime(2026, 1, 1, tzinfo=UTC)


def at(i: int) -> datetime:
    return START + timedelta(seconds=i)


def thread_with_tool_turn() -> list[Message]:
    """u0, a0, u1, a1(call c1), tool(c1), a1', u2, a2 — eight messages, created one second apart."""
    specs = [
        ("user", (TextPart("u0"),)),
        ("assistant", (TextPart("a0"),)),
        ("user", (TextPart("weather in Oslo?"),)),
        ("assistant", (ToolCallPart("c1", "weather", {"city": "Oslo"}),)),
        ("tool", (ToolResultPart("c1", "weather", {"sky": "grey"}),)),
        ("assistant", (TextPart("It is grey."),)),
        ("user", (TextPart("u2"),)),
        ("assistant", (TextPart("a2"),)),
    ]
    return [
        Message(id=f"m{i}", role=role, parts=parts, created_at=at(i), thread_id=T, resource_id=R)
        for i, (role, parts) in enumerate(specs)
    ]


def run_input(processors, store, new, *, exists=True, client_ids=()):
    turn = Turn(
        agent=None,
        thread_id=T,
        resource_id=R,
        store=store,
        input_messages=list(new),
        client_ids=set(client_ids),
        thread_exists=exists,
        thread_last_sequence=len(store.threads.get(T, [])),
    )
    conversation = Conversation(system=[], messages=new, loaded_ids=turn.loaded_ids)
    ProcessorRunner(turn, conversation).run_input(processors)
    return turn, conversation


def new_user(text: str, i: int = 100, **kw) -> Message:
    return Message.create("user", text, created_at=at(i), **kw)


def test_window_that_starts_at_a_tool_result_sends_no_orphan():
    store = InMemoryStore()
    store.add(T, thread_with_tool_turn())
    _, conversation = run_input([MessageHistory(4)], store, [new_user("next")])
    prompt = conversation.request_messages()
    # The window is [tool(c1), a1', u2, a2]: the result's call is outside it, so the result goes.
    assert [m.id for m in prompt][:-1] == ["m5", "m6", "m7"]
    assert not any(m.tool_results for m in prompt)


def test_window_that_keeps_the_call_keeps_its_result():
    store = InMemoryStore()
    store.add(T, thread_with_tool_turn())
    _, conversation = run_input([MessageHistory(5)], store, [new_user("next")])
    assert [m.id for m in conversation.request_messages()][:-1] == ["m3", "m4", "m5", "m6", "m7"]


def test_hand_placed_history_and_recall_never_duplicate_ids():
    store = InMemoryStore()
    embedder = HashEmbedder(dimensions=32)
    store.add(T, thread_with_tool_turn(), embedder=embedder)
    recall = SemanticRecall(embedder=embedder, top_k=3, message_range=2, scope="thread")
    _, conversation = run_input([MessageHistory(3), recall, MessageHistory(6)], store, [new_user("u2")])
    ids = [m.id for m in conversation.request_messages()]
    assert len(ids) == len(set(ids))
    stored_order = [m.id for m in thread_with_tool_turn()]
    loaded = [i for i in ids if i in stored_order]
    assert loaded == sorted(loaded, key=stored_order.index)


def test_client_echo_without_ids_is_history_not_new_input():
    store = InMemoryStore()
    store.add(T, thread_with_tool_turn()[:2])
    echo = [
        Message.create("user", "u0", created_at=at(100)),
        Message.create("assistant", "a0", created_at=at(100)),
    ]
    turn, conversation = run_input([MessageHistory(10)], store, [*echo, new_user("new question")])
    assert [m.text for m in conversation.new_input] == ["new question"]
    assert [m.id for m in conversation.messages][:2] == ["m0", "m1"]
    assert turn.info.echoed == 2


def test_client_echo_longer_than_the_window_is_still_recognised():
    store = InMemoryStore()
    stored = [m for m in thread_with_tool_turn() if m.text]
    store.add(T, stored)
    echo = [Message.create(m.role, m.text, created_at=at(100)) for m in stored]
    _, conversation = run_input([MessageHistory(2)], store, [*echo, new_user("new")])
    assert [m.text for m in conversation.new_input] == ["new"]
    assert len(conversation.messages) == 3  # the window of 2, then the new message


def test_output_saves_input_and_responses_on_the_turn():
    store = InMemoryStore()
    history = MessageHistory(10)
    turn, conversation = run_input([history], store, [new_user("hi")], exists=False)
    reply = Message.create("assistant", "hello", created_at=at(101))
    responses = ProcessorRunner(turn, conversation).run_output([history], [reply])
    assert responses == [reply]
    assert [m.text for m in turn.writes.messages] == ["hi", "hello"]


def test_working_memory_reads_the_store_and_offers_its_tool():
    store = InMemoryStore(working_memory={("resource", R): "# User\n- Name: Ada"})
    turn, conversation = run_input([WorkingMemory()], store, [new_user("hi")])
    assert "Name: Ada" in conversation.system[0].text
    assert "updateWorkingMemory" in turn.tools


def test_processor_context_mark_loaded_records_on_the_turn():
    turn = Turn(agent=None, thread_id=T, resource_id=R, store=None, input_messages=[])
    ctx = ProcessorContext(processor_id="p", messages=(), turn=turn)
    message = Message.create("user", "old")
    ctx.mark_loaded([message])
    assert message.id in ctx.loaded_ids and message.id in turn.loaded_ids
