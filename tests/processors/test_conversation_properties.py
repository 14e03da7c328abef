"""Property tests of the conversation object (DESIGN §2 rules 13, 16, 17), with no database.

Random threads with tool turns go through processors that behave the way memory processors may:
they load a history window (which may cut a tool pair), recall groups around random messages
(overlapping the window, duplicated), mark what they load, and return the list scrambled (memory
moved and duplicated, some of it dropped or stripped of parts). Whatever they return, every model
request must be a valid conversation: `assert_valid_prompt` states what that means, and
tests/pipeline/test_prompt_invariants.py uses it on real agents.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from memproc.messages import Message, TextPart, ToolCallPart, ToolResultPart
from memproc.processors import MessageHistory, SemanticRecall, TokenLimiter, ToolCallFilter
from memproc.processors.conversation import Conversation, echoed_prefix, whole_tool_pairs
from memproc.processors.runner import ProcessorRunner
from memproc.processors.store import InMemoryStore
from memproc.processors.turn import Turn
from memproc.testing import HashEmbedder
from tests.processors.conftest import StubCounter

BASE = datetime(2024, 1, 1, tzinfo=UTC)
INSTRUCTIONS = Message.create("system", "You are a test agent.", id="instructions:test")
TOPICS = ["weather", "puppy", "revenue", "flight", "recipe", "garden"]

PROPERTIES = settings(max_examples=200, deadline=None, database=None)


# --- the invariants -------------------------------------------------------------------------------


def assert_valid_prompt(
    messages: Sequence[Message],
    *,
    new_input_ids: Sequence[str],
    memory_ids: Collection[str] | None = None,
) -> None:
    """Asserts what every model request must be (rules 13 and 16, and what the OpenAI API enforces).

    (a) no two messages share an id; (b) system messages all come first; (c) the non-system messages
    before the turn's new input came from memory (`memory_ids`, when given) and are in non-decreasing
    `created_at` order, the new input keeps its given order, and nothing from memory comes after it
    (what follows is the turn's own responses); (d) every tool message's results answer calls of the
    assistant message directly before its run of tool messages, and every assistant tool call is
    answered in the run of tool messages directly after it; (e) the new input is all there. Also no
    message is empty (an assistant message without content or calls is another 400).
    """
    ids = [m.id for m in messages]
    duplicated = sorted({i for i in ids if ids.count(i) > 1})
    assert not duplicated, f"(a) duplicated ids {duplicated} in {_show(messages)}"

    n_system = next((i for i, m in enumerate(messages) if m.role != "system"), len(messages))
    late = [m.id for m in messages[n_system:] if m.role == "system"]
    assert not late, f"(b) system messages {late} after the conversation started: {_show(messages)}"

    body = list(messages[n_system:])
    body_ids = [m.id for m in body]
    missing = [i for i in new_input_ids if i not in body_ids]
    assert not missing, f"(e) new input {missing} missing from {_show(messages)}"

    assert not [m.id for m in body if not m.parts], f"empty message in {_show(messages)}"

    if new_input_ids:
        positions = [body_ids.index(i) for i in new_input_ids]
        assert positions == sorted(positions), f"(c) new input out of its order: {_show(messages)}"
        first, last = positions[0], positions[-1]
        assert last - first + 1 == len(positions), f"(c) something inside the new input: {_show(messages)}"
        memory, after = body[:first], body[last + 1 :]
    else:
        memory, after = body, []
    times = [_time(m) for m in memory]
    assert all(a <= b for a, b in itertools.pairwise(times)), f"(c) memory out of time order: {_show(memory)}"
    if memory_ids is not None:
        stray = [m.id for m in memory if m.id not in memory_ids]
        assert not stray, f"(c) {stray} before the new input but not from memory: {_show(messages)}"
        late_memory = [m.id for m in after if m.id in memory_ids]
        assert not late_memory, f"(c) memory {late_memory} after the new input: {_show(messages)}"

    for i, message in enumerate(body):
        if message.role == "tool":
            start = i
            while start > 0 and body[start - 1].role == "tool":
                start -= 1
            caller = body[start - 1] if start > 0 else None
            calls = (
                {c.tool_call_id for c in caller.tool_calls}
                if caller and caller.role == "assistant"
                else set()
            )
            orphans = [r.tool_call_id for r in message.tool_results if r.tool_call_id not in calls]
            assert message.tool_results and not orphans, (
                f"(d) tool message {message.id} answers {orphans or 'nothing'}, not a call of the "
                f"assistant message before its run: {_show(messages)}"
            )
        if message.role == "assistant" and message.tool_calls:
            end = i + 1
            while end < len(body) and body[end].role == "tool":
                end += 1
            answered = {r.tool_call_id for m in body[i + 1 : end] for r in m.tool_results}
            unanswered = [c.tool_call_id for c in message.tool_calls if c.tool_call_id not in answered]
            assert not unanswered, (
                f"(d) calls {unanswered} of {message.id} not answered right after it: {_show(messages)}"
            )


def _time(message: Message) -> float:
    return message.created_at.timestamp() if message.created_at else float("-inf")


def _show(messages: Sequence[Message]) -> str:
    def one(m: Message) -> str:
        tools = [f"call:{c.tool_call_id}" for c in m.tool_calls] + [
            f"result:{r.tool_call_id}" for r in m.tool_results
        ]
        return f"{m.role}:{m.id}" + (f"{tools}" if tools else "")

    return "[" + ", ".join(one(m) for m in messages) + "]"


# --- strategies -----------------------------------------------------------------------------------


@st.composite
def threads(draw: st.DrawFn, *, max_turns: int = 6) -> list[Message]:
    """A stored thread: turns of a user message, 0-2 rounds of an assistant message with 1-3 tool
    calls and the tool message(s) holding all their results, then an assistant answer, each with
    its stored `sequence`. `created_at` strictly increases, or never decreases (ties); ids are unique,
    call ids unique or repeated across turns."""
    clock = itertools.count(1)
    thread: list[Message] = []
    # Some OpenAI-compatible servers number calls per response ("call_0"), so ids repeat across turns.
    reuse_call_ids = draw(st.booleans())
    # One turn's input shares one timestamp: then only the stored sequence orders it.
    ties = draw(st.booleans())
    tick = next(clock)

    def add(role: str, content: Any, id: str) -> None:
        nonlocal tick
        if thread and (not ties or draw(st.booleans())):
            tick = next(clock)
        created_at = BASE + timedelta(seconds=tick)
        thread.append(Message.create(role, content, id=id, created_at=created_at, sequence=len(thread) + 1))

    for t in range(draw(st.integers(1, max_turns))):
        topic = draw(st.sampled_from(TOPICS))
        add("user", f"tell me about the {topic} please", f"u{t}")
        for r in range(draw(st.sampled_from([0, 0, 1, 1, 2]))):
            calls = [
                ToolCallPart(f"call-{j}" if reuse_call_ids else f"call-{t}-{r}-{j}", "lookup", {"q": topic})
                for j in range(draw(st.integers(1, 3)))
            ]
            text = draw(st.sampled_from(["", f"Looking up the {topic}."]))
            add("assistant", [TextPart(text), *calls] if text else calls, f"a{t}-{r}")
            results = [
                ToolResultPart(c.tool_call_id, "lookup", f"{topic} facts {c.tool_call_id}") for c in calls
            ]
            cuts = sorted(draw(st.sets(st.integers(1, len(results) - 1)))) if len(results) > 1 else []
            for k, (lo, hi) in enumerate(itertools.pairwise([0, *cuts, len(results)])):
                add("tool", results[lo:hi], f"t{t}-{r}-{k}")
        add("assistant", f"the {topic} is fine", f"a{t}")
    return thread


def new_inputs(draw: st.DrawFn) -> list[Message]:
    """1-3 new user messages; their created_at is anything (or nothing): their order is the caller's."""
    times = st.one_of(st.none(), st.integers(-50, 200).map(lambda s: BASE + timedelta(seconds=s)))
    return [
        Message.create(
            "user",
            f"new question {j} about the {draw(st.sampled_from(TOPICS))}",
            id=f"new{j}",
            created_at=draw(times),
        )
        for j in range(draw(st.integers(1, 3)))
    ]


def scramble(
    data: st.DataObject, messages: Sequence[Message], *, loaded: Collection[str], extra_system: bool = False
) -> list[Message]:
    """A list a careless processor may return: memory (`loaded`) moved anywhere, duplicated, some of
    it dropped or stripped of parts; the other messages (new input, responses) keep their order."""
    memory = [m for m in messages if m.id in loaded]
    fixed = [m for m in messages if m.id not in loaded]
    kept: list[Message] = []
    for m in memory:
        action = data.draw(st.sampled_from(["keep", "keep", "keep", "twice", "drop", "strip"]))
        if action == "drop":
            continue
        if action == "strip" and len(m.parts) > 1:
            parts = data.draw(
                st.lists(st.sampled_from(m.parts), min_size=1, max_size=len(m.parts) - 1, unique_by=id)
            )
            m = m.replace(parts=tuple(p for p in m.parts if any(p is q for q in parts)))
        kept += [m, m] if action == "twice" else [m]
    if extra_system:
        kept.append(Message.create("system", "Remembered from another conversation", id="recall:other"))
    combined = data.draw(st.permutations([*kept, *fixed]))
    # The non-memory messages go back into the slots they landed on, in their own order.
    slots = [i for i, m in enumerate(combined) if m.id not in loaded and m.role != "system"]
    for slot, m in zip(slots, fixed, strict=True):
        combined[slot] = m
    return combined


class Loader:
    """A memory processor: marks `messages` loaded and returns them with the prompt, scrambled."""

    def __init__(self, pid: str, messages: Sequence[Message], data: st.DataObject, *, system: bool) -> None:
        self.id, self.messages, self.data, self.system = pid, list(messages), data, system

    def process_input(self, ctx: Any) -> list[Message]:
        ctx.mark_loaded(self.messages)
        return scramble(
            self.data, [*self.messages, *ctx.messages], loaded=ctx.loaded_ids, extra_system=self.system
        )


class Scrambler:
    """Any processor (limiter, filter, guardrail): returns the prompt scrambled, on input or per step."""

    def __init__(self, pid: str, data: st.DataObject) -> None:
        self.id, self.data = pid, data

    def process_input(self, ctx: Any) -> list[Message]:
        return scramble(self.data, ctx.messages, loaded=ctx.loaded_ids)

    def process_input_step(self, ctx: Any) -> list[Message]:
        return scramble(self.data, ctx.messages, loaded=ctx.loaded_ids)


def turn_for(new_input: list[Message], **fields: Any) -> tuple[Turn, Conversation, ProcessorRunner]:
    fields.setdefault("store", None)
    turn = Turn(agent=None, thread_id="t1", resource_id="r1", input_messages=new_input, **fields)
    conversation = Conversation(system=[INSTRUCTIONS], messages=new_input, loaded_ids=turn.loaded_ids)
    return turn, conversation, ProcessorRunner(turn, conversation)


def blocks(thread: Sequence[Message]) -> list[list[Message]]:
    """Each assistant message with tool calls, with the tool messages answering it."""
    found: list[list[Message]] = []
    for m in thread:
        if m.role == "assistant" and m.tool_calls:
            found.append([m])
        elif m.role == "tool":
            found[-1].append(m)
    return found


# --- the conversation under careless processors ---------------------------------------------------


@PROPERTIES
@given(thread=threads(), data=st.data())
def test_every_request_is_a_valid_conversation_whatever_memory_processors_return(thread, data):
    """A window that may cut a tool pair, overlapping recall groups, scrambled lists on input and on
    every step: each request the model would get satisfies the invariants, and a tool turn of this
    turn's responses reaches the model whole."""
    k = data.draw(st.integers(0, len(thread)), label="window")
    window = thread[len(thread) - k :]
    hits = data.draw(
        st.lists(
            st.tuples(st.integers(0, len(thread) - 1), st.integers(0, 2), st.integers(0, 2)), max_size=4
        ),
        label="recall hits",
    )
    recalled = [m for i, before, after in hits for m in thread[max(0, i - before) : i + after + 1]]
    new_input = new_inputs(data.draw)
    chain: list[Any] = [
        Loader("message-history", window, data, system=False),
        Loader("semantic-recall", recalled, data, system=data.draw(st.booleans())),
    ]
    chain += [Scrambler(f"other-{i}", data) for i in range(data.draw(st.integers(0, 2)))]
    order = data.draw(st.permutations(range(len(chain))), label="processor order")
    _, conversation, runner = turn_for(new_input)

    runner.run_input([chain[i] for i in order])
    new_ids = [m.id for m in new_input]
    memory_ids = {m.id for m in thread}
    assert_valid_prompt(conversation.request_messages(), new_input_ids=new_ids, memory_ids=memory_ids)

    step_chain = [Scrambler("step", data)] if data.draw(st.booleans()) else []
    view = runner.run_input_step(step_chain, step=0, responses=[])
    prompt = conversation.request_messages(system=view.system, messages=view.messages)
    assert_valid_prompt(prompt, new_input_ids=new_ids, memory_ids=memory_ids)

    call = Message.create(
        "assistant",
        [ToolCallPart("call-now", "lookup", {})],
        id="resp-call",
        created_at=BASE + timedelta(seconds=data.draw(st.integers(-50, 200))),
    )
    result = Message.create(
        "tool", [ToolResultPart("call-now", "lookup", "ok")], id="resp-result", created_at=BASE
    )
    view = runner.run_input_step(step_chain, step=1, responses=[call, result])
    prompt = conversation.request_messages(system=view.system, messages=view.messages)
    assert_valid_prompt(prompt, new_input_ids=new_ids, memory_ids=memory_ids)
    assert prompt[-2:] == [call, result]
    assert prompt[0] == INSTRUCTIONS


@PROPERTIES
@given(thread=threads(), data=st.data())
def test_the_conversation_drops_only_what_makes_a_pair_incomplete(thread, data):
    """Nothing is lost needlessly: every message with text survives (only tool parts go), and a tool
    turn that memory loaded whole (the call and all its results, unchanged) reaches the model whole."""
    window = thread[len(thread) - data.draw(st.integers(0, len(thread))) :]
    new_input = new_inputs(data.draw)
    _, conversation, runner = turn_for(new_input)
    runner.run_input([Loader("message-history", window, data, system=False), Scrambler("other", data)])
    loaded = conversation.messages
    prompt = conversation.request_messages()
    by_id = {m.id: m for m in prompt}
    for m in loaded:
        if any(isinstance(p, TextPart) for p in m.parts):
            assert m.id in by_id, f"{m.id} has text but was dropped: {_show(prompt)}"
            assert [p for p in by_id[m.id].parts if isinstance(p, TextPart)] == [
                p for p in m.parts if isinstance(p, TextPart)
            ]
    present = {m.id: m for m in loaded}
    for block in blocks(thread):
        if all(present.get(m.id) == m for m in block):
            assert all(by_id.get(m.id) == m for m in block), (
                f"whole block {_show(block)} cut: {_show(prompt)}"
            )


@PROPERTIES
@given(thread=threads(max_turns=5), data=st.data())
def test_real_memory_processors_over_an_in_memory_store_give_valid_prompts(thread, data):
    """MessageHistory, SemanticRecall (thread scope), ToolCallFilter and TokenLimiter, hand-placed in
    any order over an InMemoryStore: the prompt is valid, the new input all there."""
    embedder = HashEmbedder(dimensions=64)
    store = InMemoryStore()
    store.add("t1", thread, embedder=embedder)
    new_input = [m.replace(created_at=None, thread_id="t1") for m in new_inputs(data.draw)]
    counter = StubCounter()
    needed = sum(counter.count_message(m) for m in [INSTRUCTIONS, *new_input]) + TokenLimiter.reply_tokens
    pool: list[Any] = [
        MessageHistory(last_messages=data.draw(st.integers(0, 8), label="last_messages")),
        SemanticRecall(
            embedder=embedder,
            top_k=data.draw(st.integers(1, 4), label="top_k"),
            message_range=data.draw(st.integers(0, 2), label="message_range"),
            scope="thread",
        ),
        ToolCallFilter(),
        TokenLimiter(needed + data.draw(st.integers(0, 60), label="slack"), counter=counter),
    ]
    chain = data.draw(st.lists(st.sampled_from(pool), unique=True, min_size=1), label="chain")
    turn, conversation, runner = turn_for(
        new_input, store=store, thread_exists=True, thread_last_sequence=len(thread)
    )

    runner.run_input(chain)

    prompt = conversation.request_messages()
    assert_valid_prompt(prompt, new_input_ids=[m.id for m in new_input], memory_ids={m.id for m in thread})
    assert set(turn.loaded_ids) <= {m.id for m in thread}


# --- whole_tool_pairs -----------------------------------------------------------------------------


@st.composite
def message_soups(draw: st.DrawFn) -> tuple[list[Message], set[str]]:
    """Any list of user, assistant (text and/or calls) and tool messages over a few call ids, in any
    order, with unique ids; and a random set of protected ids."""
    call_ids = st.sampled_from(["c1", "c2", "c3", "c4"])
    messages = []
    for i in range(draw(st.integers(0, 12))):
        role = draw(st.sampled_from(["user", "assistant", "assistant", "tool", "tool"]))
        if role == "user":
            parts: list[Any] = [TextPart(f"user {i}")]
        elif role == "assistant":
            calls = [ToolCallPart(c, "lookup", {}) for c in draw(st.lists(call_ids, max_size=3, unique=True))]
            parts = [TextPart(f"assistant {i}")] if draw(st.booleans()) or not calls else []
            parts += calls
        else:
            parts = [ToolResultPart(c, "lookup", i) for c in draw(st.lists(call_ids, min_size=1, max_size=3))]
        messages.append(Message.create(role, parts, id=f"m{i}"))
    protected = draw(st.sets(st.sampled_from([m.id for m in messages]))) if messages else set()
    return messages, protected


@PROPERTIES
@given(soup=message_soups())
def test_whole_tool_pairs_is_idempotent(soup):
    """Applying whole_tool_pairs twice changes nothing more than applying it once."""
    messages, protected = soup
    once = whole_tool_pairs(messages, protected=protected)
    assert whole_tool_pairs(once, protected=protected) == once


@PROPERTIES
@given(soup=message_soups())
def test_whole_tool_pairs_never_changes_protected_messages(soup):
    """Protected messages (the turn's own input) come out exactly as they went in."""
    messages, protected = soup
    out = {m.id: m for m in whole_tool_pairs(messages, protected=protected)}
    for m in messages:
        if m.id in protected:
            assert out.get(m.id) == m


@PROPERTIES
@given(soup=message_soups())
def test_whole_tool_pairs_output_is_a_subsequence_of_parts_of_the_input(soup):
    """Each output message is an input message, in input order, with a sub-sequence of its parts
    (only tool-call and tool-result parts removed) and everything else unchanged."""
    messages, protected = soup
    out = whole_tool_pairs(messages, protected=protected)
    source = iter(messages)
    for m in out:
        original = next((s for s in source if s.id == m.id), None)
        assert original is not None, f"{m.id} is not in the input, in order"
        assert m.replace(parts=original.parts) == original
        remaining = iter(original.parts)
        assert all(any(p is q for q in remaining) for p in m.parts), f"{m.id}: parts not a sub-sequence"
        removed = [p for p in original.parts if not any(p is q for q in m.parts)]
        assert all(isinstance(p, ToolCallPart | ToolResultPart) for p in removed)


@PROPERTIES
@given(soup=message_soups())
def test_whole_tool_pairs_output_is_valid_when_only_user_messages_are_protected(soup):
    """With no protected tool parts, what comes out pairs every call with its results (invariant d)."""
    messages, protected = soup
    roles = {m.id: m.role for m in messages}
    protected = {i for i in protected if roles[i] == "user"}
    out = whole_tool_pairs(messages, protected=protected)
    assert_valid_prompt(out, new_input_ids=[])


# --- echoed_prefix (rule 17) ----------------------------------------------------------------------


def echoed_copy(message: Message) -> Message:
    """What a client resending the conversation without ids sends: a fresh id, no timestamp."""
    return Message.create(message.role, message.parts)


@PROPERTIES
@given(thread=threads(), data=st.data())
def test_echoed_prefix_is_the_resent_tail(thread, data):
    """A client resending the stored tail (any length) plus one new message: the prefix is the tail."""
    tail = data.draw(st.integers(0, len(thread)), label="tail")
    new = data.draw(st.sampled_from([m for m in thread if m.role == "user"] + [None]), label="new")
    new_message = Message.create("user", new.text if new else "something new")
    inputs = [*(echoed_copy(m) for m in thread[len(thread) - tail :]), new_message]
    assert echoed_prefix(inputs, thread) == tail


@PROPERTIES
@given(thread=threads(), data=st.data())
def test_echoed_prefix_never_counts_the_last_input_message(thread, data):
    """Inputs made only of stored messages: the last one is still new, and what is counted matches."""
    inputs = [echoed_copy(m) for m in data.draw(st.lists(st.sampled_from(thread), min_size=1, max_size=8))]
    if data.draw(st.booleans()):  # exactly the stored tail, nothing new after it
        inputs = [echoed_copy(m) for m in thread[-data.draw(st.integers(1, len(thread))) :]]
    k = echoed_prefix(inputs, thread)
    assert 0 <= k <= len(inputs) - 1
    for sent, stored in zip(inputs[:k], thread[len(thread) - k :], strict=True):
        assert (sent.role, sent.text) == (stored.role, stored.text)
