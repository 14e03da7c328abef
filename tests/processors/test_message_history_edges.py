"""MessageHistory at its edges, with no database: its own option checks, what it asks the store,
quarantined and resent messages, the window's turn info, the summary and when a fold is due, and what
the output hook records for the turn's save."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from memproc.exceptions import ConfigurationError, MessageConflict
from memproc.messages import Message, TextPart, ToolCallPart, ToolResultPart, thaw
from memproc.processors.base import ProcessorContext
from memproc.processors.compaction import SUMMARY_MESSAGE_ID, CompactionOptions
from memproc.processors.message_history import MessageHistory, newest_within, savable, with_withheld
from memproc.processors.store import InMemoryStore, ThreadSummaryValue
from memproc.processors.turn import Turn
from memproc.processors.turn_info import SummaryUsed
from memproc.tools import Tool

from .conftest import StubCounter, ids, tool_call, tool_result

T, R = "t1", "user-1"


def exactly(text: str) -> str:
    """A `match=` pattern for the whole message, not a part of it."""
    return f"^{re.escape(text)}$"


@dataclass
class RecordingStore(InMemoryStore):
    """An InMemoryStore that notes every read MessageHistory makes, with its arguments."""

    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def messages_recent(self, **kwargs: Any) -> list[Message]:
        self.calls.append(("messages_recent", kwargs))
        return super().messages_recent(**kwargs)

    def messages_existing(self, *, ids: Any, resource_id: str | None) -> dict[str, tuple[str, str]]:
        self.calls.append(("messages_existing", {"ids": list(ids), "resource_id": resource_id}))
        return super().messages_existing(ids=ids, resource_id=resource_id)

    def thread_summary(self, **kwargs: Any) -> ThreadSummaryValue | None:
        self.calls.append(("thread_summary", kwargs))
        return super().thread_summary(**kwargs)

    def called(self, name: str) -> list[dict[str, Any]]:
        return [kwargs for call, kwargs in self.calls if call == name]


def stored(n: int, *, tokens: int = 10, resource_id: str | None = R, prefix: str = "m") -> list[Message]:
    """`n` alternating user/assistant messages m0..m{n-1}, each costing `tokens` (StubCounter)."""
    return [
        Message.create(
            "user" if i % 2 == 0 else "assistant",
            f"{prefix}{i} text",
            id=f"{prefix}{i}",
            resource_id=resource_id,
            metadata={"tokens": tokens},
        )
        for i in range(n)
    ]


def store_with(messages: list[Message]) -> RecordingStore:
    """A store holding `messages` as thread T, numbered 1..n (set directly: see the xfail below on
    `InMemoryStore.add`)."""
    return RecordingStore(
        threads={T: [m.replace(thread_id=T, sequence=i + 1) for i, m in enumerate(messages)]}
    )


def new_user(text: str, *, id: str | None = None, tokens: int | None = None) -> Message:
    return Message.create("user", text, id=id, metadata={"tokens": tokens} if tokens is not None else {})


def input_ctx(
    store: Any,
    new: list[Message],
    *,
    exists: bool | None = None,
    client_ids: set[str] | frozenset[str] = frozenset(),
    agent: Any = None,
    tools: Sequence[Tool] = (),
    resource_id: str | None = R,
) -> ProcessorContext:
    thread = store.threads.get(T, []) if isinstance(store, InMemoryStore) else []
    exists = bool(thread) if exists is None else exists
    turn = Turn(
        agent=agent,
        thread_id=T,
        resource_id=resource_id,
        store=store,
        input_messages=list(new),
        client_ids=set(client_ids),
        thread_exists=exists,
        thread_last_sequence=len(thread) if exists else None,
    )
    for tool in tools:
        turn.add_tool(tool)
    return ProcessorContext(
        processor_id="message-history",
        messages=tuple(new),
        thread_id=T,
        resource_id=resource_id,
        agent=agent,
        store=store,
        turn=turn,
        input_messages=tuple(new),
    )


def output_ctx(ctx: ProcessorContext, responses: list[Message]) -> ProcessorContext:
    """The output hook's context of the same turn: the responses, the same state dict (as the runner)."""
    return ProcessorContext(
        processor_id=ctx.processor_id,
        messages=tuple(responses),
        phase="output",
        thread_id=ctx.thread_id,
        resource_id=ctx.resource_id,
        agent=ctx.agent,
        store=ctx.store,
        state=ctx.state,
        loaded_ids=ctx.loaded_ids,
        input_messages=ctx.input_messages,
        turn=ctx.turn,
    )


def run_turn(
    history: MessageHistory, ctx: ProcessorContext, responses: Sequence[Message] = ()
) -> ProcessorContext:
    history.process_input(ctx)
    out = output_ctx(ctx, list(responses) or [Message.create("assistant", "ok")])
    history.process_output_result(out)
    return out


# --- options ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [-1, -10, True, False, 2.0, "3", None])
def test_last_messages_must_be_an_integer_of_zero_or_more(bad):
    with pytest.raises(
        ConfigurationError, match=exactly("MessageHistory(last_messages=...) must be an integer >= 0")
    ):
        MessageHistory(bad)


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "10"])
def test_history_tokens_must_be_a_positive_integer_or_none(bad):
    message = "MessageHistory(history_tokens=...) must be a positive integer or None"
    with pytest.raises(ConfigurationError, match=exactly(message)):
        MessageHistory(10, history_tokens=bad)


def test_a_bad_counter_is_an_error_that_names_message_history():
    message = 'MessageHistory(counter=...) must be a token counter, a dotted path, or {"CLASS": ..., "OPTIONS": {...}}'
    with pytest.raises(ConfigurationError, match=exactly(message)):
        MessageHistory(10, counter=object())


def test_the_smallest_valid_options_are_accepted_and_kept():
    assert MessageHistory(0).last_messages == 0
    assert MessageHistory(3, history_tokens=1).history_tokens == 1
    counter = StubCounter()
    history = MessageHistory(
        4, history_tokens=7, counter=counter, read_only=True, compaction={"trigger_tokens": 50}
    )
    assert (history.last_messages, history.history_tokens, history.counter, history.read_only) == (
        4,
        7,
        counter,
        True,
    )
    assert history.compaction == CompactionOptions(trigger_tokens=50)
    assert history.get_counter() is counter


def test_defaults_are_ten_messages_no_budget_no_compaction_and_saving():
    history = MessageHistory()
    assert (history.last_messages, history.history_tokens, history.compaction, history.read_only) == (
        10,
        None,
        None,
        False,
    )
    ctx = input_ctx(store_with(stored(12)), [new_user("next", id="new")])
    assert ids(history.process_input(ctx)) == [f"m{i}" for i in range(2, 12)] + ["new"]
    saved = run_turn(MessageHistory(), input_ctx(store_with(stored(2)), [new_user("x")])).turn.writes.messages
    assert len(saved) == 2


# --- when it does nothing, and what it asks the store ----------------------------------------------


def test_no_turn_no_store_or_no_thread_means_no_history_and_no_read():
    store = store_with(stored(4))
    new = (new_user("next"),)
    ctx = input_ctx(store, list(new))
    history = MessageHistory(3)
    without_turn = ProcessorContext(processor_id="p", messages=new, thread_id=T, resource_id=R, store=store)
    without_store = ProcessorContext(
        processor_id="p", messages=new, thread_id=T, resource_id=R, turn=ctx.turn
    )
    without_thread = ProcessorContext(
        processor_id="p", messages=new, thread_id="", store=store, turn=ctx.turn
    )
    for bare in (without_turn, without_store, without_thread):
        assert history.process_input(bare) is None
    assert store.calls == []
    assert ctx.turn.info.as_dict() == {}


def test_the_window_is_one_read_with_the_turns_thread_resource_and_last_sequence():
    store = store_with(stored(20))
    ctx = input_ctx(store, [new_user("next", id="new")])
    result = MessageHistory(5).process_input(ctx)
    assert store.calls == [
        ("messages_recent", {"thread_id": T, "resource_id": R, "limit": 5, "last_sequence": 20})
    ]
    assert ids(result) == ["m15", "m16", "m17", "m18", "m19", "new"]


def test_the_window_is_recorded_in_turn_info_and_marked_loaded():
    ctx = input_ctx(store_with(stored(5)), [new_user("next", id="new")])
    MessageHistory(2).process_input(ctx)
    assert ctx.turn.info.as_dict() == {
        "history": [
            {"id": "m3", "role": "assistant", "text": "m3 text"},
            {"id": "m4", "role": "user", "text": "m4 text"},
        ]
    }
    assert ctx.turn.loaded_ids == {"m3", "m4"}
    assert ctx.loaded_ids == frozenset({"m3", "m4"})


def test_the_echo_check_reads_further_back_than_a_short_window():
    thread = stored(6)
    store = store_with(thread)
    echo = [Message.create(m.role, m.text) for m in thread[-3:]]
    ctx = input_ctx(store, [*echo, new_user("next", id="new")])
    result = MessageHistory(2).process_input(ctx)
    assert [kwargs["limit"] for kwargs in store.called("messages_recent")] == [3]
    assert ids(result) == ["m4", "m5", "new"]
    assert ctx.turn.info.echoed == 3


def test_a_new_thread_is_never_read():
    store = RecordingStore()
    ctx = input_ctx(store, [new_user("a"), new_user("b")], exists=False)
    assert compacting(5, 10).process_input(ctx) is None
    assert store.calls == []
    assert ctx.turn.info.as_dict() == {"history": []}


def test_an_empty_window_reads_only_to_recognise_an_echo():
    store = store_with(stored(4))
    one = input_ctx(store, [new_user("next", id="new")])
    assert MessageHistory(0).process_input(one) is None
    assert store.calls == []
    assert one.turn.info.as_dict() == {"history": []}

    echo = Message.create("assistant", "m3 text")
    two = input_ctx(store, [echo, new_user("next", id="new")])
    assert ids(MessageHistory(0).process_input(two)) == ["new"]
    assert [kwargs["limit"] for kwargs in store.called("messages_recent")] == [1]
    assert two.turn.info.as_dict() == {"history": [], "echoed": 1}


def test_no_echo_leaves_no_echo_count():
    ctx = input_ctx(store_with(stored(3)), [new_user("something else"), new_user("next")])
    MessageHistory(5).process_input(ctx)
    assert "echoed" not in ctx.turn.info.as_dict()


# --- quarantine ------------------------------------------------------------------------------------


def test_a_quarantined_stored_message_is_not_loaded_even_without_guardrails():
    thread = stored(5)
    thread[1] = thread[1].replace(metadata={"quarantine": {"status": "flagged"}})
    thread[2] = thread[2].replace(metadata={"quarantine": {"status": "confirmed"}})
    thread[3] = thread[3].replace(metadata={"quarantine": {"status": "cleared"}})
    thread[4] = thread[4].replace(metadata={"quarantine": "flagged"})  # not a guardrail's flag
    ctx = input_ctx(store_with(thread), [new_user("next", id="new")])
    assert ids(MessageHistory(10).process_input(ctx)) == ["m0", "m3", "m4", "new"]
    assert [entry.id for entry in ctx.turn.info.history] == ["m0", "m3", "m4"]


def test_a_quarantined_message_still_counts_for_the_echo_check():
    thread = stored(2)
    thread[1] = thread[1].replace(metadata={"quarantine": {"status": "flagged"}})
    echo = [Message.create(m.role, m.text) for m in thread]
    ctx = input_ctx(store_with(thread), [*echo, new_user("next", id="new")])
    assert ids(MessageHistory(10).process_input(ctx)) == ["m0", "new"]
    assert ctx.turn.info.echoed == 2


# --- ids the caller chose --------------------------------------------------------------------------


def test_a_resent_id_stored_in_this_thread_outside_the_window_is_dropped():
    store = store_with(stored(10))
    resent = Message.create("user", "m3 text", id="m3")
    new = new_user("next", id="client-next")
    ctx = input_ctx(store, [resent, new], client_ids={"m3", "client-next"})
    result = MessageHistory(2).process_input(ctx)
    assert ids(result) == ["m8", "m9", "client-next"]
    assert store.called("messages_existing") == [{"ids": ["m3", "client-next"], "resource_id": R}]


def test_a_resent_id_stored_without_a_resource_counts_as_this_threads():
    store = store_with(stored(6, resource_id=None))
    resent = Message.create("user", "m1 text", id="m1")
    ctx = input_ctx(store, [resent, new_user("next", id="new")], client_ids={"m1"})
    assert ids(MessageHistory(2).process_input(ctx)) == ["m4", "m5", "new"]


def test_a_turn_without_a_resource_looks_resent_ids_up_among_messages_without_one():
    """A thread with no resource (resource_id None) asks the store for resource "", the key its
    messages were stored under, and a resent id found there is this thread's: dropped, no conflict."""
    store = store_with(stored(6, resource_id=None))
    resent = Message.create("user", "m1 text", id="m1")
    ctx = input_ctx(store, [resent, new_user("next", id="new")], client_ids={"m1"}, resource_id=None)
    assert ids(MessageHistory(2).process_input(ctx)) == ["m4", "m5", "new"]
    assert store.called("messages_existing") == [{"ids": ["m1"], "resource_id": ""}]


def test_an_id_stored_under_another_resource_is_free_in_this_one():
    """Ids name messages within their resource: another resource's "x0" neither clashes nor shows."""
    thread = [*stored(1, resource_id="someone-else", prefix="x"), *stored(4)]
    store = store_with(thread)
    ctx = input_ctx(store, [new_user("hello", id="x0")], client_ids={"x0"})
    result = MessageHistory(2).process_input(ctx)
    assert ids(result) == ["m2", "m3", "x0"] and result[2].text == "hello"
    assert store.called("messages_existing") == [{"ids": ["x0"], "resource_id": R}]


@pytest.mark.parametrize("window", [0, 2])
def test_an_id_stored_in_another_thread_of_the_resource_is_a_conflict(window):
    """One policy with the API (its 409): the caller's own id, used in another of its threads."""
    store = store_with(stored(3))
    store.add("other-thread", [Message.create("user", "elsewhere", id="x1", resource_id=R)])
    ctx = input_ctx(
        store, [new_user("hello", id="x1"), new_user("and more", id="x2")], client_ids={"x1", "x2"}
    )
    with pytest.raises(MessageConflict, match=r"already in use: x1;") as raised:
        MessageHistory(window).process_input(ctx)
    assert "x2" not in str(raised.value)


def test_ids_the_caller_did_not_choose_are_never_looked_up():
    store = store_with(stored(3))
    store.add("other-thread", [Message.create("user", "elsewhere", id="x1", resource_id=R)])
    new = new_user("hello", id="x1")
    ctx = input_ctx(store, [new])  # the id was generated for this turn, not sent by the caller
    assert MessageHistory(0).process_input(ctx) is None
    assert store.called("messages_existing") == []


# --- the token budget ------------------------------------------------------------------------------


def test_the_token_budget_uses_the_configured_counter():
    ctx = input_ctx(store_with(stored(6, tokens=10)), [new_user("next", id="new")])
    result = MessageHistory(10, history_tokens=30, counter=StubCounter()).process_input(ctx)
    assert ids(result) == ["m3", "m4", "m5", "new"]
    assert ctx.turn.loaded_ids == {"m3", "m4", "m5"}


def test_a_stored_call_answered_by_the_new_input_is_kept_over_the_budget():
    thread = [
        Message.create("user", "q", id="q", metadata={"tokens": 5}),
        tool_call("c1", id="call", tokens=5),
    ]
    answer = tool_result("c1", id="result", tokens=50)
    ctx = input_ctx(store_with(thread), [answer])
    result = MessageHistory(10, history_tokens=6, counter=StubCounter()).process_input(ctx)
    assert ids(result) == ["call", "result"]


# --- summaries and compaction ----------------------------------------------------------------------


def summarized_store(n: int = 10, **summary: Any) -> RecordingStore:
    store = store_with(stored(n))
    summary.setdefault("text", "The user said hello.")
    summary.setdefault("covered_sequence", 6)
    summary.setdefault("version", 3)
    store.summaries[T] = ThreadSummaryValue(**summary)
    return store


def test_the_summary_enters_after_the_input_and_covered_messages_leave_the_window():
    store = summarized_store()
    ctx = input_ctx(store, [new_user("next", id="new")])
    result = compacting(6, 10_000).process_input(ctx)
    # m5 is sequence 6, the last the summary covers.
    assert ids(result) == ["m6", "m7", "m8", "m9", "new", SUMMARY_MESSAGE_ID]
    assert result[-1].role == "system" and "The user said hello." in result[-1].text
    assert ctx.turn.info.as_dict()["summary"] == {"covered_sequence": 6, "version": 3}
    assert store.called("thread_summary") == [{"thread_id": T, "resource_id": R}]


def test_a_blank_summary_adds_no_message_but_still_covers_its_messages():
    store = summarized_store(text="  \n ")
    ctx = input_ctx(store, [new_user("next", id="new")])
    result = compacting(6, 10_000).process_input(ctx)
    assert ids(result) == ["m6", "m7", "m8", "m9", "new"]
    assert ctx.turn.info.summary is None


def test_a_summary_alone_is_returned_when_the_window_is_empty():
    ctx = input_ctx(summarized_store(), [new_user("next", id="new")])
    assert ids(compacting(0, 10_000).process_input(ctx)) == [
        "new",
        SUMMARY_MESSAGE_ID,
    ]


def test_without_compaction_a_stored_summary_is_neither_read_nor_used():
    store = summarized_store()
    ctx = input_ctx(store, [new_user("next", id="new")])
    result = MessageHistory(6).process_input(ctx)
    assert ids(result) == ["m4", "m5", "m6", "m7", "m8", "m9", "new"]
    assert store.called("thread_summary") == []
    assert ctx.turn.info.summary is None


def test_a_new_thread_reads_no_summary():
    store = summarized_store()
    ctx = input_ctx(store, [new_user("next", id="new")], exists=False)
    assert compacting(6, 1).process_input(ctx) is None
    assert store.calls == []


class StoreWithoutSummaries:
    """The store protocol without its optional `thread_summary`."""

    def __init__(self, messages: list[Message]) -> None:
        self.inner = store_with(messages)
        self.threads = self.inner.threads

    def messages_recent(self, **kwargs: Any) -> list[Message]:
        return self.inner.messages_recent(**kwargs)

    def messages_existing(self, *, ids: Any, resource_id: str | None) -> dict[str, tuple[str, str]]:
        return self.inner.messages_existing(ids=ids, resource_id=resource_id)


def test_a_store_without_summaries_is_a_store_with_none():
    store = StoreWithoutSummaries(stored(4))
    ctx = input_ctx(store, [new_user("next", id="new")], exists=True)
    result = compacting(2, 10_000).process_input(ctx)
    assert ids(result) == ["m2", "m3", "new"]
    assert ctx.turn.info.summary is None


def compacting(last_messages: int, trigger: int, **options: Any) -> MessageHistory:
    return MessageHistory(
        last_messages, compaction={"trigger_tokens": trigger, **options}, counter=StubCounter()
    )


def test_a_fold_is_due_when_the_messages_before_the_window_reach_the_trigger():
    agent = SimpleNamespace(model_id="openai/gpt-4o-mini")
    ctx = input_ctx(store_with(stored(20)), [new_user("next", id="new", tokens=1)], agent=agent)
    history = compacting(5, 150, keep_tokens=500, model="extractive")
    out = run_turn(history, ctx)
    # Messages 1..15 lie before the window (16..20), estimated at 10 tokens each (the window's mean).
    assert out.turn.memory_report()["compaction"] == {
        "due": True,
        "through_sequence": 15,
        "estimated_tokens": 150,
        "trigger_tokens": 150,
        "keep_tokens": 500,
        "model": "extractive",
        "agent_model": "openai/gpt-4o-mini",
    }


def test_no_fold_is_due_one_token_below_the_trigger():
    ctx = input_ctx(store_with(stored(20)), [new_user("next", id="new", tokens=1)])
    out = run_turn(compacting(5, 151), ctx)
    assert out.turn.writes.compaction is None


def test_what_a_job_already_counted_is_taken_as_counted():
    store = summarized_store(20, covered_sequence=5, counted_through=10, counted_tokens=33, version=2)
    ctx = input_ctx(store, [new_user("next", id="new", tokens=1)])
    out = run_turn(compacting(5, 83), ctx)
    # 33 counted for 6..10, then 11..15 estimated at 10 each.
    due = out.turn.writes.compaction
    assert (due.through_sequence, due.estimated_tokens) == (15, 83)
    assert out.turn.info.summary == SummaryUsed(covered_sequence=5, version=2)


def test_with_a_summary_only_the_uncovered_messages_are_estimated():
    store = summarized_store(20, covered_sequence=5, version=1)
    ctx = input_ctx(store, [new_user("next", id="new", tokens=1)])
    due = run_turn(compacting(5, 100), ctx).turn.writes.compaction
    assert (due.through_sequence, due.estimated_tokens) == (15, 100)
    ctx = input_ctx(summarized_store(20, covered_sequence=5, version=1), [new_user("next", tokens=1)])
    assert run_turn(compacting(5, 101), ctx).turn.writes.compaction is None


def test_with_an_empty_window_the_whole_thread_is_estimated_from_the_new_input():
    ctx = input_ctx(store_with(stored(20)), [new_user("next", id="new", tokens=7)])
    out = run_turn(compacting(0, 140), ctx)
    due = out.turn.writes.compaction
    assert (due.through_sequence, due.estimated_tokens) == (20, 140)
    ctx = input_ctx(store_with(stored(20)), [new_user("next", id="new", tokens=7)])
    assert run_turn(compacting(0, 141), ctx).turn.writes.compaction is None


@pytest.mark.parametrize("agent", [None, SimpleNamespace(model_id="default"), SimpleNamespace(model_id="")])
def test_the_default_model_is_named_none_for_the_worker(agent):
    ctx = input_ctx(store_with(stored(20)), [new_user("next", tokens=1)], agent=agent)
    due = run_turn(compacting(5, 10), ctx).turn.writes.compaction
    assert due.agent_model is None
    assert (due.model, due.keep_tokens) == (None, 2000)


def test_a_new_thread_or_read_only_memory_asks_for_no_fold():
    ctx = input_ctx(RecordingStore(), [new_user("next", tokens=1000)], exists=False)
    assert run_turn(compacting(0, 1), ctx).turn.writes.compaction is None

    read_only = MessageHistory(5, compaction={"trigger_tokens": 1}, counter=StubCounter(), read_only=True)
    ctx = input_ctx(store_with(stored(20)), [new_user("next", tokens=1)])
    out = run_turn(read_only, ctx)
    assert out.turn.writes.compaction is None
    assert out.turn.writes.messages == []


def test_an_output_hook_without_a_window_read_asks_for_no_fold():
    history = compacting(5, 1)
    ctx = input_ctx(store_with(stored(20)), [new_user("next", id="new")])
    reply = Message.create("assistant", "hi", id="reply")
    history.process_output_result(output_ctx(ctx, [reply]))  # no input hook ran: nothing to go by
    assert ctx.turn.writes.compaction is None
    assert ids(ctx.turn.writes.messages) == ["new", "reply"]


# --- output: what the turn saves -------------------------------------------------------------------


def internal_tool() -> Tool:
    return Tool(
        name="updateWorkingMemory",
        description="",
        parameters={"type": "object", "properties": {}},
        execute=lambda **_: None,
        internal=True,
    )


def test_output_records_input_and_responses_without_internal_calls():
    new = new_user("remember I like tea", id="new")
    ctx = input_ctx(store_with(stored(2)), [new], tools=[internal_tool()])
    memory_call = Message.create(
        "assistant",
        [TextPart("Noted."), ToolCallPart("wm1", "updateWorkingMemory", {})],
        id="call",
    )
    memory_result = Message.create("tool", [ToolResultPart("wm1", "updateWorkingMemory", "ok")], id="result")
    reply = Message.create("assistant", "I will remember.", id="reply")
    history = MessageHistory(2)
    history.process_input(ctx)
    assert history.process_output_result(output_ctx(ctx, [memory_call, memory_result, reply])) is None
    writes = ctx.turn.writes.messages
    assert ids(writes) == ["new", "call", "reply"]
    assert writes[1].parts == (TextPart("Noted."),)
    assert writes[0] is new and writes[2] is reply


def test_output_without_a_turn_or_thread_records_nothing():
    ctx = input_ctx(store_with(stored(2)), [new_user("x")])
    reply = [Message.create("assistant", "hi")]
    no_thread = ProcessorContext(processor_id="p", messages=tuple(reply), phase="output", turn=ctx.turn)
    assert MessageHistory(2).process_output_result(no_thread) is None
    assert ctx.turn.writes.messages == []
    no_turn = ProcessorContext(processor_id="p", messages=tuple(reply), phase="output", thread_id=T)
    assert MessageHistory(2).process_output_result(no_turn) is None


def test_savable_drops_system_messages_internal_calls_and_unanswered_calls():
    question = Message.create("user", "q", id="q")
    note = Message.create("system", "a note", id="note")
    answered = tool_call("c1", "search", id="answered")
    result = tool_result("c1", "search", id="answered-result")
    unanswered = tool_call("c2", "search", text="Let me look.", id="unanswered")
    bare_call = tool_call("c3", "search", id="bare-call")
    internal = tool_call("wm1", "updateWorkingMemory", id="internal")
    internal_result = tool_result("wm1", "updateWorkingMemory", id="internal-result")
    orphan_result = tool_result("c0", "search", id="orphan-result")  # its call is in no list here
    messages = [
        question,
        note,
        answered,
        result,
        unanswered,
        bare_call,
        internal,
        internal_result,
        orphan_result,
    ]
    kept = savable(messages, internal_tools={"updateWorkingMemory"})
    assert ids(kept) == ["q", "answered", "answered-result", "unanswered", "orphan-result"]
    assert kept[3].parts == (TextPart("Let me look."),)
    assert kept[0] is question and kept[1] is answered and kept[2] is result and kept[4] is orphan_result


def test_savable_with_no_internal_tools_keeps_every_answered_call():
    messages = [
        tool_call("wm1", "updateWorkingMemory", id="call"),
        tool_result("wm1", "updateWorkingMemory", id="r"),
    ]
    assert savable(messages, internal_tools=set()) == messages


# --- newest_within ---------------------------------------------------------------------------------


def costly(name: str, tokens: int) -> Message:
    return Message.create("user", name, id=name, metadata={"tokens": tokens})


def test_newest_within_keeps_what_fits_exactly_and_nothing_past_it():
    history = [costly("a", 10), costly("b", 10), costly("c", 10)]
    counter = StubCounter()
    assert ids(newest_within(history, [], budget=20, counter=counter)) == ["b", "c"]
    assert ids(newest_within(history, [], budget=19, counter=counter)) == ["c"]
    assert newest_within(history, [], budget=9, counter=counter) == []


def test_newest_within_stops_at_the_first_group_that_does_not_fit():
    history = [costly("old", 1), costly("big", 50), costly("newest", 1)]
    assert ids(newest_within(history, [], budget=10, counter=StubCounter())) == ["newest"]


def test_newest_within_keeps_a_call_the_first_new_message_answers_whatever_it_costs():
    history = [costly("q", 1), tool_call("c1", id="call", tokens=50)]
    new = [tool_result("c1", id="result", tokens=1)]
    assert ids(newest_within(history, new, budget=10, counter=StubCounter())) == ["call"]


def test_newest_within_counts_the_pinned_history_but_not_the_new_input():
    history = [costly("q", 5), tool_call("c1", id="call", tokens=5)]
    new = [tool_result("c1", id="result", tokens=100)]
    assert ids(newest_within(history, new, budget=10, counter=StubCounter())) == ["q", "call"]
    assert ids(newest_within(history, new, budget=9, counter=StubCounter())) == ["call"]


def test_newest_within_counts_every_pinned_group():
    history = [tool_call("c1", id="call-1", tokens=5), tool_call("c2", id="call-2", tokens=5), costly("x", 5)]
    new = [tool_result("c1", id="r1", tokens=1), tool_result("c2", id="r2", tokens=1)]
    counter = StubCounter()
    assert ids(newest_within(history, new, budget=12, counter=counter)) == ["call-1", "call-2"]
    assert ids(newest_within(history, new, budget=15, counter=counter)) == ["call-1", "call-2", "x"]


def test_newest_within_leaves_out_groups_the_window_cut_without_stopping_there():
    history = [
        costly("x", 1),
        tool_result("c0", id="orphan-result", tokens=1),  # its call lies before the window
        tool_call("c9", id="unanswered", tokens=1),  # its result is nowhere
        costly("y", 1),
    ]
    assert ids(newest_within(history, [], budget=100, counter=StubCounter())) == ["x", "y"]


# --- InMemoryStore.add numbered while it extended the list it counted (1, 3, 5, then 4) ------------------------------------------------------------------------


def test_in_memory_store_numbers_added_messages_one_after_another():
    store = InMemoryStore()
    store.add(T, stored(3))
    store.add(T, stored(1, prefix="later"))
    assert [m.sequence for m in store.threads[T]] == [1, 2, 3, 4]


# --- what guardrails withheld, kept on the saved user message ------------------------------------


WITHHELD = {"channel": "search", "message_id": "old", "processor_id": "prompt-injection-detector"}


def test_records_withheld_during_the_turn_are_kept_on_the_saved_user_message():
    ctx = input_ctx(store_with(stored(2)), [new_user("next", id="new")])
    history = MessageHistory(2)
    history.process_input(ctx)
    ctx.turn.writes.withheld = [WITHHELD]
    out = output_ctx(ctx, [Message.create("assistant", "ok", id="reply")])
    history.process_output_result(out)
    saved = {m.id: m for m in ctx.turn.writes.messages}
    assert list(saved) == ["new", "reply"]
    assert thaw(saved["new"].metadata)["withheld"] == [WITHHELD]
    assert "withheld" not in saved["reply"].metadata


def test_with_withheld_adds_to_the_last_user_message_only_and_keeps_what_it_had():
    earlier = Message.create("user", "first", id="u1")
    last = Message.create("user", "second", id="u2", metadata={"withheld": [{"channel": "history"}], "k": 1})
    reply = Message.create("assistant", "ok", id="a1")
    result = with_withheld([earlier, last, reply], [WITHHELD])
    assert [m.id for m in result] == ["u1", "u2", "a1"]
    assert result[0] is earlier and result[2] is reply  # the others are the same objects
    assert thaw(result[1].metadata) == {"withheld": [{"channel": "history"}, WITHHELD], "k": 1}
    assert thaw(last.metadata)["withheld"] == [{"channel": "history"}]  # the input is not changed
    assert (result[1].text, result[1].role) == ("second", "user")


def test_with_withheld_without_records_or_a_user_message_changes_nothing():
    messages = [Message.create("assistant", "ok", id="a1"), Message.create("tool", "", id="t1")]
    assert with_withheld(messages, [WITHHELD]) == messages
    user = [Message.create("user", "hi", id="u1")]
    unchanged = with_withheld(user, [])
    assert unchanged == user and unchanged is not user
    assert "withheld" not in unchanged[0].metadata
