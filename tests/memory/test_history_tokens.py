"""History by tokens (issue 20 item 2): `Memory(last_messages=N, history_tokens=T)` loads the newest
history that fits T tokens, whole tool call/result pairs only, and never drops the new input."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memproc import Memory
from memproc.exceptions import ConfigurationError
from memproc.llm.types import ModelResponse, ToolCall
from memproc.messages import Message, TextPart, ToolCallPart, ToolResultPart
from memproc.processors import MessageHistory
from memproc.processors.base import ProcessorContext
from memproc.processors.store import InMemoryStore
from memproc.processors.tokens import get_token_counter
from memproc.processors.turn import Turn
from tests.processors.conftest import StubCounter

BASE = datetime(2024, 1, 1, tzinfo=UTC)
T, R = "t1", "user-1"


# --- the property ---------------------------------------------------------------------------------------


@dataclass
class Thread:
    """A generated thread: messages in order, and for each the unit it belongs to (a tool exchange —
    an assistant message with calls and the tool messages answering them — is one unit)."""

    messages: list[Message] = field(default_factory=list)
    units: list[int] = field(default_factory=list)
    pending_call: str | None = None  # the stored thread ends with a call the new input answers


@st.composite
def threads(draw: st.DrawFn) -> Thread:
    thread = Thread()
    n_calls = 0

    def add(message: Message, unit: int) -> None:
        message = message.replace(created_at=BASE + timedelta(seconds=len(thread.messages)))
        thread.messages.append(message)
        thread.units.append(unit)

    def cost() -> dict:
        return {"tokens": draw(st.integers(1, 40))}

    for unit in range(draw(st.integers(0, 25))):
        kind = draw(st.sampled_from(["user", "assistant", "tools"]))
        if kind != "tools":
            add(Message.create(kind, f"{kind} {unit}", metadata=cost()), unit)
            continue
        ids = [f"c{n_calls + i}" for i in range(draw(st.integers(1, 3)))]
        n_calls += len(ids)
        text = [TextPart("let me look")] if draw(st.booleans()) else []
        add(
            Message.create(
                "assistant", [*text, *(ToolCallPart(i, "search", {}) for i in ids)], metadata=cost()
            ),
            unit,
        )
        if draw(st.booleans()):  # one tool message with every result, or one per result
            add(
                Message.create("tool", [ToolResultPart(i, "search", "ok") for i in ids], metadata=cost()),
                unit,
            )
        else:
            for i in ids:
                add(Message.create("tool", [ToolResultPart(i, "search", "ok")], metadata=cost()), unit)
    if draw(st.booleans()):  # a client-side tool: the new input answers the last stored call
        thread.pending_call = f"c{n_calls}"
        add(
            Message.create("assistant", [ToolCallPart(thread.pending_call, "client", {})], metadata=cost()),
            len(thread.units) + 1000,
        )
    return thread


def run_history(thread: Thread, new: list[Message], *, last_messages: int, budget: int) -> list[Message]:
    store = InMemoryStore()
    store.add(T, thread.messages)
    stored = store.threads[T]
    turn = Turn(
        agent=None,
        thread_id=T,
        resource_id=R,
        store=store,
        input_messages=new,
        thread_exists=bool(stored),
        thread_last_sequence=len(stored) or None,
    )
    ctx = ProcessorContext(
        processor_id="message-history",
        messages=tuple(new),
        thread_id=T,
        resource_id=R,
        store=store,
        turn=turn,
    )
    history = MessageHistory(last_messages, history_tokens=budget, counter=StubCounter())
    result = history.process_input(ctx)
    return list(new) if result is None else result


@settings(max_examples=300, deadline=None, database=None)
@given(
    thread=threads(),
    last_messages=st.integers(0, 30),
    budget=st.integers(1, 300),
    input_tokens=st.integers(1, 500),
)
def test_token_budget_history_never_splits_tool_pairs(thread, last_messages, budget, input_tokens):
    counter = StubCounter()
    new: list[Message] = [Message.create("user", "the question", metadata={"tokens": input_tokens})]
    if thread.pending_call:
        answer = Message.create("tool", [ToolResultPart(thread.pending_call, "client", "done")])
        new = [answer, *new]
    result = run_history(thread, new, last_messages=last_messages, budget=budget)

    # The new input is all there, last, in its order (never dropped, whatever the budget).
    assert [m.id for m in result[-len(new) :]] == [m.id for m in new]
    history = result[: -len(new)]
    ids = [m.id for m in thread.messages]
    position = {m.id: i for i, m in enumerate(thread.messages)}
    # The newest min(last_messages, stored): this oracle once shared the window's negative slice.
    window = ids[max(0, len(ids) - last_messages) :] if last_messages else []

    # History comes from the window, in order, as the newest run of it (no gap inside).
    assert all(m.id in window for m in history)
    kept = [position[m.id] for m in history]
    assert kept == sorted(kept)
    if kept:
        assert kept == list(range(kept[0], len(ids)))

    # Never a call without its results or a result without its call: whole units only.
    units = {thread.units[i] for i in kept}
    for unit in units:
        members = [i for i, u in enumerate(thread.units) if u == unit]
        assert set(members) <= set(kept), f"unit {unit} split: kept {kept}"

    # Within the budget, unless the pair the input answers alone is over it.
    pinned = [i for i in kept if thread.pending_call and thread.units[i] >= 1000]
    used = sum(counter.count_message(thread.messages[i]) for i in kept)
    assert used <= budget or set(kept) == set(pinned)

    # As much as fits: the next older whole unit inside the window would not.
    start = kept[0] if kept else len(ids)
    first_in_window = len(ids) - len(window)
    if start > first_in_window:
        older_unit = thread.units[start - 1]
        members = [i for i, u in enumerate(thread.units) if u == older_unit]
        if min(members) >= first_in_window:  # a whole unit inside the window
            cost = sum(counter.count_message(thread.messages[i]) for i in members)
            assert used + cost > budget, (
                f"unit {older_unit} ({cost} tokens) would have fit in {budget - used}"
            )


# --- through an agent ---------------------------------------------------------------------------------


def prompt_body(model, call: int = -1) -> list[Message]:
    return [m for m in model.requests[call].messages if m.role != "system"]


@pytest.mark.django_db
def test_history_is_the_newest_messages_within_the_budget(make_agent, model):
    counter = get_token_counter()
    agent = make_agent(memory=Memory(last_messages=20, history_tokens=60))
    for i in range(12):
        model.add(f"Answer number {i} is short.")
        agent.generate(f"Question number {i}, a little longer than the answer.", thread_id=T, resource_id=R)
    model.add("ok")
    agent.generate("The last question.", thread_id=T, resource_id=R)
    body = prompt_body(model)
    history, new = body[:-1], body[-1]
    assert new.text == "The last question."
    used = sum(counter.count_message(m) for m in history)
    assert used <= 60 and history[-1].text == "Answer number 11 is short."
    # One more older message would not have fitted.
    stored = agent.memory.recall(thread_id=T, last_messages=100)
    older = stored[[m.id for m in stored].index(history[0].id) - 1]
    assert used + counter.count_message(older) > 60


@pytest.mark.django_db
def test_the_new_input_is_kept_even_when_it_alone_is_over_the_budget(make_agent, model):
    agent = make_agent(memory=Memory(last_messages=10, history_tokens=20))
    model.add("first answer")
    agent.generate("hello", thread_id=T, resource_id=R)
    model.add("ok")
    long_input = "word " * 200
    result = agent.generate(long_input, thread_id=T, resource_id=R)
    body = prompt_body(model)
    assert body[-1].text == long_input and [m.text for m in body[:-1]] == ["hello", "first answer"]
    assert result.messages[0].text == long_input


@pytest.mark.django_db
def test_a_tool_pair_at_the_budgets_edge_is_dropped_whole(make_agent, model):
    from memproc import tool

    @tool
    def lookup(q: str) -> str:
        """Looks something up."""
        return "a result " * 30

    agent = make_agent(tools=[lookup], memory=Memory(last_messages=10, history_tokens=40))
    model.add(
        ModelResponse(tool_calls=[ToolCall("c1", "lookup", {"q": "x"})], finish_reason="tool_calls"), "found"
    )
    agent.generate("look it up", thread_id=T, resource_id=R)
    model.add("ok")
    agent.generate("thanks", thread_id=T, resource_id=R)
    body = prompt_body(model)
    # The result alone costs more than the budget: neither it nor its call is loaded.
    assert [m.role for m in body] == ["assistant", "user"] and body[0].text == "found"


def test_options_are_validated():
    for bad in (0, -5, True, "100"):
        with pytest.raises(ConfigurationError):
            Memory(history_tokens=bad)
        with pytest.raises(ConfigurationError):
            MessageHistory(10, history_tokens=bad)
    assert Memory(history_tokens=500).with_options({"read_only": True}).history_tokens == 500
