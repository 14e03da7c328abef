"""The processor runner as processors and the turn see it: what each hook's context holds, what a
returned value does, the errors a processor that breaks the return contract gets, aborts turned into
tripwires, hook times on the turn record and spans, with no database."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest

from memproc import logs, telemetry
from memproc.events import StreamEvent, Tripwire
from memproc.exceptions import ModelError, TripWire
from memproc.llm.types import ModelRequest, ToolCall
from memproc.messages import Message, ToolResultPart
from memproc.processors.conversation import Conversation
from memproc.processors.runner import Blocked, ProcessorRunner, build_chains
from memproc.processors.turn import Turn
from memproc.tools import Tool
from tests.processors.conftest import assistant, system, user

INSTRUCTIONS = system("You are a test agent.", id="instructions")


def a_tool(name: str, *, internal: bool = False) -> Tool:
    return Tool(name, f"{name} things", {"type": "object", "properties": {}}, lambda: "ok", internal=internal)


def make_runner(
    new: list[Message] | None = None,
    *,
    history: tuple[Message, ...] = (),
    tools: tuple[Tool, ...] = (),
    trace: Any = telemetry.NO_SPAN,
) -> tuple[Turn, Conversation, ProcessorRunner]:
    new = [user("hello", id="in-1")] if new is None else new
    turn = Turn(
        agent="the-agent",
        thread_id="t1",
        resource_id="r1",
        store="the-store",  # type: ignore[arg-type] - what the context passes on, unread here
        input_messages=list(new),
        trace=trace,
    )
    turn.mark_loaded(list(history))
    for tool in tools:
        turn.add_tool(tool)
    conversation = Conversation(system=[INSTRUCTIONS], messages=[*history, *new], loaded_ids=turn.loaded_ids)
    return turn, conversation, ProcessorRunner(turn, conversation)


class Spy:
    """Records the context of each hook call and returns what it was told to (per hook)."""

    def __init__(self, id: str = "spy", **returns: Any) -> None:
        self.id = id
        self.returns = returns
        self.seen: list[tuple[str, Any, tuple[Any, ...]]] = []

    def _hook(self, name: str, ctx: Any, *args: Any) -> Any:
        self.seen.append((name, ctx, args))
        value = self.returns.get(name)
        return value(ctx, *args) if callable(value) else value

    def process_input(self, ctx):
        return self._hook("process_input", ctx)

    def process_input_step(self, ctx):
        return self._hook("process_input_step", ctx)

    def process_output_step(self, ctx):
        return self._hook("process_output_step", ctx)

    def process_tool_result(self, ctx, result):
        return self._hook("process_tool_result", ctx, result)

    def process_output_result(self, ctx):
        return self._hook("process_output_result", ctx)

    def process_output_stream(self, ctx, part):
        return self._hook("process_output_stream", ctx, part)

    def process_api_error(self, ctx, error):
        return self._hook("process_api_error", ctx, error)


class Named:
    """A processor known by its id only (what `build_chains` reads)."""

    def __init__(self, id: str) -> None:
        self.id = id


# --- build_chains ---------------------------------------------------------------------------------


def test_memory_runs_first_on_input_and_last_on_output():
    history, recall, guard, judge = Named("message-history"), Named("semantic-recall"), Spy("g"), Spy("j")
    chain_in, chain_out = build_chains(
        memory_input=[history, recall], memory_output=[history], user_input=[guard], user_output=[judge]
    )
    assert chain_in == [history, recall, guard]
    assert chain_out == [judge, history]


def test_a_memory_processor_the_user_placed_replaces_the_automatic_one_in_that_direction_only():
    auto, placed, other = Named("message-history"), Named("message-history"), Spy("g")
    chain_in, chain_out = build_chains(
        memory_input=[auto], memory_output=[auto], user_input=[other, placed], user_output=[]
    )
    assert chain_in == [other, placed]
    assert chain_out == [auto]
    chain_in, chain_out = build_chains(
        memory_input=[auto], memory_output=[auto], user_input=[], user_output=[placed, other]
    )
    assert chain_in == [auto]
    assert chain_out == [placed, other]


# --- the context each hook sees -------------------------------------------------------------------


def test_process_input_sees_the_turn_its_prompt_and_its_phase():
    old = assistant("earlier", id="h-1")
    tool = a_tool("lookup")
    turn, conversation, runner = make_runner(history=(old,), tools=(tool,))
    spy = Spy()
    runner.run_input([spy])
    ((_, ctx, _),) = spy.seen
    assert ctx.processor_id == "spy"
    assert ctx.phase == "input"
    assert [m.id for m in ctx.messages] == ["h-1", "in-1"] and isinstance(ctx.messages, tuple)
    assert [m.id for m in ctx.system_messages] == ["instructions"]
    assert ctx.tools == [tool]
    assert (ctx.thread_id, ctx.resource_id, ctx.agent, ctx.store, ctx.turn) == (
        "t1",
        "r1",
        "the-agent",
        "the-store",
        turn,
    )
    assert ctx.loaded_ids == frozenset({"h-1"})
    assert [m.id for m in ctx.input_messages] == ["in-1"]
    assert ctx.step == 0 and ctx.request is None and ctx.tool_calls == ()


def test_each_processor_keeps_one_state_across_the_turns_hooks_and_its_own():
    _, _, runner = make_runner()

    def count(ctx, *_):
        ctx.state["calls"] = ctx.state.get("calls", 0) + 1

    first = Spy("first", process_input=count, process_input_step=count, process_output_result=count)
    second = Spy("second", process_input=count)
    runner.run_input([first, second])
    runner.run_input_step([first], step=0, responses=[])
    runner.run_output([first], [assistant("done", id="r-1")])
    states = [ctx.state for _, ctx, _ in first.seen]
    assert states[0] is states[1] is states[2]
    assert states[0] == {"calls": 3}
    assert second.seen[0][1].state == {"calls": 1}


def test_the_phase_of_each_hook():
    _, _, runner = make_runner()
    spy = Spy()
    part = StreamEvent("text-delta", text="x")
    result = ToolResultPart("c1", "lookup", "ok")
    request = ModelRequest(messages=[INSTRUCTIONS, user("hi", id="u")])
    runner.run_input([spy])
    runner.run_input_step([spy], step=1, responses=[])
    runner.run_output_step([spy], step=1, responses=[], tool_calls=[])
    runner.run_tool_result([spy], step=1, responses=[], result=result)
    runner.run_output([spy], [])
    runner.run_stream_part([spy], part)
    runner.run_api_error([spy], step=1, request=request, error=ModelError("down"))
    assert [(name, ctx.phase) for name, ctx, _ in spy.seen] == [
        ("process_input", "input"),
        ("process_input_step", "input_step"),
        ("process_output_step", "output_step"),
        ("process_tool_result", "tool_result"),
        ("process_output_result", "output"),
        ("process_output_stream", "stream"),
        ("process_api_error", "api_error"),
    ]


# --- process_input ----------------------------------------------------------------------------------


def test_a_returned_list_becomes_the_prompt_the_next_processor_sees_and_none_keeps_it():
    _, conversation, runner = make_runner()
    extra = system("Be brief.", id="brief")
    added = Spy("adder", process_input=lambda ctx: [extra, *ctx.messages, user("more", id="in-2")])
    keeper = Spy("keeper")
    runner.run_input([added, keeper])
    seen = keeper.seen[0][1]
    assert [m.id for m in seen.messages] == ["in-1", "in-2"]
    assert [m.id for m in seen.system_messages] == ["instructions", "brief"]
    assert [m.id for m in conversation.messages] == ["in-1", "in-2"]
    assert [m.id for m in conversation.system] == ["instructions", "brief"]


@pytest.mark.parametrize(
    ("returned", "error"),
    [
        ("text", "Processor 'bad' returned str; expected a list of Message or None"),
        (b"text", "Processor 'bad' returned bytes; expected a list of Message or None"),
        (42, "Processor 'bad' returned int; expected a list of Message or None"),
        ([user("ok", id="u"), "text"], "Processor 'bad' returned a non-Message item: 'text'"),
    ],
)
def test_a_hook_returning_something_else_than_messages_is_a_type_error(returned, error):
    _, conversation, runner = make_runner()
    with pytest.raises(TypeError) as raised:
        runner.run_input([Spy("bad", process_input=returned)])
    assert str(raised.value) == error
    with pytest.raises(TypeError) as raised:
        runner.run_output([Spy("bad", process_output_result=returned)], [])
    assert str(raised.value) == error
    with pytest.raises(TypeError) as raised:
        runner.run_input_step([Spy("bad", process_input_step=returned)], step=0, responses=[])
    assert str(raised.value) == error
    with pytest.raises(TypeError) as raised:
        runner.run_output_step(
            [Spy("bad", process_output_step=returned)], step=0, responses=[], tool_calls=[]
        )
    assert str(raised.value) == error
    assert [m.id for m in conversation.messages] == ["in-1"]


def test_a_tuple_of_messages_is_a_list_of_messages():
    _, conversation, runner = make_runner()
    runner.run_input([Spy("tuple", process_input=lambda ctx: (user("only", id="in-9"),))])
    assert [m.id for m in conversation.messages] == ["in-9"]


# --- aborts -----------------------------------------------------------------------------------------


def test_an_abort_is_blocked_with_the_tripwire_the_result_reports():
    _, _, runner = make_runner()
    guard = Spy(
        "guard",
        process_input=lambda ctx: ctx.abort("no secrets", retry=True, metadata={"rule": "secret"}),
    )
    later = Spy("later")
    with pytest.raises(Blocked) as raised:
        runner.run_input([guard, later])
    assert raised.value.tripwire == Tripwire(
        reason="no secrets", processor_id="guard", phase="input", retry=True, metadata={"rule": "secret"}
    )
    assert str(raised.value) == "no secrets"
    assert later.seen == []


def test_an_abort_without_a_reason_names_the_processor_and_the_phase_is_the_hooks():
    _, _, runner = make_runner()
    guard = Spy("guard", process_output_result=lambda ctx: ctx.abort())
    with pytest.raises(Blocked) as raised:
        runner.run_output([guard], [assistant("x", id="r")])
    assert raised.value.tripwire == Tripwire(
        reason="Tripwire triggered by guard", processor_id="guard", phase="output", retry=False, metadata={}
    )


def test_a_tripwire_raised_by_hand_is_reported_with_the_processor_that_raised_it():
    _, _, runner = make_runner()

    def raw(ctx):
        raise TripWire("")

    with pytest.raises(Blocked) as raised:
        runner.run_output_step([Spy("raw", process_output_step=raw)], step=2, responses=[], tool_calls=[])
    assert raised.value.tripwire == Tripwire(
        reason="Tripwire triggered by raw", processor_id="raw", phase="output_step", retry=False, metadata={}
    )

    def delegated(ctx):
        raise TripWire("judge said no", processor_id="judge")

    with pytest.raises(Blocked) as raised:
        runner.run_input([Spy("wrapper", process_input=delegated)])
    assert (raised.value.tripwire.reason, raised.value.tripwire.processor_id) == ("judge said no", "judge")

    def unnamed(ctx):
        raise TripWire("", processor_id="judge")

    with pytest.raises(Blocked) as raised:
        runner.run_input([Spy("wrapper", process_input=unnamed)])
    assert raised.value.tripwire.reason == "Tripwire triggered by judge"


def test_the_tripwires_metadata_is_a_copy():
    _, _, runner = make_runner()
    error = TripWire("no", metadata={"a": 1})

    def raw(ctx):
        raise error

    with pytest.raises(Blocked) as raised:
        runner.run_input([Spy("raw", process_input=raw)])
    raised.value.tripwire.metadata["b"] = 2
    assert error.metadata == {"a": 1}


# --- output, steps, tool results ----------------------------------------------------------------------


def test_output_hooks_shape_responses_without_system_messages_or_repeated_ids():
    _, _, runner = make_runner()
    reply = assistant("the answer", id="r-1")
    doubler = Spy(
        "doubler",
        process_output_result=lambda ctx: [
            system("s", id="s"),
            *ctx.messages,
            *ctx.messages,
            assistant("p.s.", id="r-2"),
        ],
    )
    reader = Spy("reader")
    out = runner.run_output([doubler, reader], [reply])
    assert [m.id for m in out] == ["r-1", "r-2"]
    assert [m.id for m in reader.seen[0][1].messages] == ["r-1", "r-2"]
    assert [m.id for m in reader.seen[0][1].input_messages] == ["in-1"]
    assert runner.run_output([Spy("none")], [reply]) == [reply]


def test_an_output_step_sees_its_step_and_calls_and_may_veto_a_call():
    _, _, runner = make_runner()
    call = ToolCall("c1", "lookup", {"q": "x"})
    step_reply = assistant("calling", id="r-1")
    vetoer = Spy(
        "vetoer", process_output_step=lambda ctx: [system("s", id="s"), *ctx.messages, *ctx.messages]
    )
    reader = Spy("reader")
    out = runner.run_output_step([vetoer, reader], step=3, responses=[step_reply], tool_calls=[call])
    assert [m.id for m in out] == ["r-1"]
    ctx = vetoer.seen[0][1]
    assert (ctx.step, ctx.tool_calls, ctx.phase) == (3, (call,), "output_step")
    assert [m.id for m in reader.seen[0][1].messages] == ["r-1"]
    with pytest.raises(TypeError, match="returned str"):
        runner.run_output_step([Spy("bad", process_output_step="x")], step=0, responses=[], tool_calls=[])


def test_an_input_step_changes_what_one_call_sees_and_not_the_conversation():
    lookup, search = a_tool("lookup"), a_tool("search")
    _, conversation, runner = make_runner(tools=(lookup, search))
    response = assistant("so far", id="r-1")
    hint = system("Use lookup.", id="hint")

    def narrow(ctx):
        ctx.system_messages = [*ctx.system_messages, hint]
        ctx.tools = [t for t in ctx.tools if t.name == "lookup"]

    adder = Spy(
        "adder",
        process_input_step=lambda ctx: [*ctx.messages, user("step note", id="in-2"), system("x", id="hint2")],
    )
    reader = Spy("reader")
    view = runner.run_input_step(
        [Spy("narrow", process_input_step=narrow), adder, reader], step=2, responses=[response]
    )
    assert [m.id for m in view.system] == ["instructions", "hint", "hint2"]
    assert [m.id for m in view.messages] == ["in-1", "r-1", "in-2"]
    assert view.tools == [lookup]
    first = adder.seen[0][1]
    assert first.step == 2
    assert [m.id for m in first.system_messages] == ["instructions", "hint"]
    assert first.tools == [lookup]
    assert [m.id for m in first.messages] == ["in-1", "r-1"]
    assert [m.id for m in reader.seen[0][1].messages] == ["in-1", "r-1", "in-2"]
    # Nothing of it stays for the next call.
    assert [m.id for m in conversation.system] == ["instructions"]
    assert [m.id for m in conversation.messages] == ["in-1"]
    plain = runner.run_input_step([], step=3, responses=[])
    assert ([m.id for m in plain.system], [m.id for m in plain.messages], plain.tools) == (
        ["instructions"],
        ["in-1"],
        [lookup, search],
    )


def test_an_input_step_that_sets_tools_to_something_else_is_a_type_error():
    _, _, runner = make_runner(tools=(a_tool("lookup"),))

    def bad(ctx):
        ctx.tools = ["lookup"]

    with pytest.raises(TypeError) as raised:
        runner.run_input_step([Spy("bad", process_input_step=bad)], step=0, responses=[])
    assert str(raised.value) == "Processor 'bad' set ctx.tools to something not a list of Tool"

    def not_a_list(ctx):
        ctx.tools = a_tool("lookup")

    with pytest.raises(TypeError, match="not a list of Tool"):
        runner.run_input_step([Spy("bad", process_input_step=not_a_list)], step=0, responses=[])

    def a_tuple(ctx):
        ctx.tools = (a_tool("other"),)

    view = runner.run_input_step([Spy("ok", process_input_step=a_tuple)], step=0, responses=[])
    assert [t.name for t in view.tools] == ["other"] and isinstance(view.tools, list)


def test_a_tool_result_hook_may_replace_the_result_for_the_same_call():
    _, _, runner = make_runner()
    original = ToolResultPart("c1", "lookup", "secret")
    redacted = ToolResultPart("c1", "lookup", "[redacted]")
    redactor = Spy("redactor", process_tool_result=lambda ctx, result: redacted)
    reader = Spy("reader")
    assert (
        runner.run_tool_result([Spy("none"), redactor, reader], step=4, responses=[], result=original)
        is redacted
    )
    ctx, args = reader.seen[0][1], reader.seen[0][2]
    assert args == (redacted,)
    assert (ctx.step, ctx.phase) == (4, "tool_result")


@pytest.mark.parametrize(
    "changed",
    [ToolResultPart("c2", "lookup", "x"), "x"],
)
def test_a_tool_result_hook_returning_another_call_or_a_non_result_is_a_type_error(changed):
    _, _, runner = make_runner()
    original = ToolResultPart("c1", "lookup", "x")
    with pytest.raises(TypeError) as raised:
        runner.run_tool_result(
            [Spy("bad", process_tool_result=lambda ctx, result: changed)],
            step=0,
            responses=[],
            result=original,
        )
    assert str(raised.value) == (
        f"Processor 'bad' must return a ToolResultPart for call 'c1' (or None), not {changed!r}"
    )


# --- API errors -------------------------------------------------------------------------------------


def test_api_error_hooks_see_the_request_as_the_ones_before_left_it():
    _, _, runner = make_runner()
    request = ModelRequest(messages=[INSTRUCTIONS, user("long", id="u-1"), assistant("a", id="a-1")])
    shorter = ModelRequest(messages=[INSTRUCTIONS, assistant("a", id="a-1")])
    error = ModelError("too long")
    first = Spy("first", process_api_error=lambda ctx, err: shorter)
    second = Spy("second")
    assert runner.run_api_error([first, second], step=5, request=request, error=error) is shorter
    ctx, args = first.seen[0][1], first.seen[0][2]
    assert ctx.request is request and args == (error,)
    assert [m.id for m in ctx.messages] == ["u-1", "a-1"]
    assert [m.id for m in ctx.system_messages] == ["instructions"]
    assert (ctx.step, ctx.phase) == (5, "api_error")
    later = second.seen[0][1]
    assert later.request is shorter
    assert [m.id for m in later.messages] == ["a-1"]


def test_an_api_error_hook_after_one_that_let_the_error_stand_may_still_ask_for_a_retry():
    _, _, runner = make_runner()
    own_system = system("You summarize.", id="other-instructions")
    request = ModelRequest(messages=[own_system, user("long", id="u-1")])
    retry = ModelRequest(messages=[own_system, user("short", id="u-2")])
    passes = Spy("passes")
    fixer = Spy("fixer", process_api_error=lambda ctx, err: retry)
    assert runner.run_api_error([passes, fixer], step=0, request=request, error=ModelError("x")) is retry
    # The failed request's own system messages, not the turn's.
    assert [m.id for m in passes.seen[0][1].system_messages] == ["other-instructions"]
    assert [m.id for m in fixer.seen[0][1].messages] == ["u-1"]


def test_no_api_error_hook_asking_for_a_retry_lets_the_error_stand():
    _, _, runner = make_runner()
    request = ModelRequest(messages=[user("x", id="u")])
    assert runner.run_api_error([Spy("a"), Spy("b")], step=0, request=request, error=ModelError("x")) is None
    assert runner.run_api_error([], step=0, request=request, error=ModelError("x")) is None


def test_an_api_error_hook_returning_something_else_or_aborting_is_a_type_error():
    _, _, runner = make_runner()
    request = ModelRequest(messages=[user("x", id="u")])
    with pytest.raises(TypeError) as raised:
        runner.run_api_error(
            [Spy("bad", process_api_error=lambda ctx, err: [])],
            step=0,
            request=request,
            error=ModelError("x"),
        )
    assert (
        str(raised.value)
        == "Processor 'bad' must return a ModelRequest from process_api_error (or None), not []"
    )
    with pytest.raises(TypeError) as raised:
        runner.run_api_error(
            [Spy("aborter", process_api_error=lambda ctx, err: ctx.abort("no"))],
            step=0,
            request=request,
            error=ModelError("x"),
        )
    assert str(raised.value) == (
        "Processor 'aborter' aborted in process_api_error, which cannot block a turn: "
        "return None to let the error stand"
    )
    assert isinstance(raised.value.__cause__, Blocked)


# --- stream parts -----------------------------------------------------------------------------------


def delta(text: str) -> StreamEvent:
    return StreamEvent("text-delta", text=text)


def test_stream_hooks_change_drop_or_split_parts_and_each_later_one_sees_every_part():
    _, _, runner = make_runner()
    upper = Spy("upper", process_output_stream=lambda ctx, part: delta(part.text.upper()))
    splitter = Spy("splitter", process_output_stream=lambda ctx, part: [delta(part.text), delta("!")])
    reader = Spy("reader", process_output_stream=lambda ctx, part: part)
    assert runner.run_stream_part([upper, splitter, reader], delta("hi")) == [delta("HI"), delta("!")]
    assert [args for _, _, args in reader.seen] == [(delta("HI"),), (delta("!"),)]
    assert reader.seen[0][1].messages == ()
    tupled = Spy("tupled", process_output_stream=lambda ctx, part: (part, part))
    assert runner.run_stream_part([tupled], delta("x")) == [delta("x"), delta("x")]


def test_a_dropped_part_reaches_no_later_stream_hook():
    _, _, runner = make_runner()
    dropper = Spy("dropper")  # returns None
    reader = Spy("reader", process_output_stream=lambda ctx, part: part)
    assert runner.run_stream_part([dropper, reader], delta("x")) == []
    assert reader.seen == []


def test_a_failing_stream_hook_is_logged_and_the_part_passes_unchanged(caplog):
    _, _, runner = make_runner()

    def broken(ctx, part):
        raise RuntimeError("boom")

    reader = Spy("reader", process_output_stream=lambda ctx, part: part)
    with caplog.at_level(logging.ERROR, logger="memproc.processors.runner"):
        assert runner.run_stream_part([Spy("broken", process_output_stream=broken), reader], delta("x")) == [
            delta("x")
        ]
    assert [args for _, _, args in reader.seen] == [(delta("x"),)]
    assert [r.getMessage() for r in caplog.records] == [
        "memproc: stream processor broken failed; part passed unchanged"
    ]


def test_a_stream_hook_failing_on_one_part_still_sees_the_next_and_the_log_names_the_turn(caplog):
    _, _, runner = make_runner()
    splitter = Spy("splitter", process_output_stream=lambda ctx, part: [part, delta("!")])

    def fails_on_text(ctx, part):
        if part.text != "!":
            raise RuntimeError("boom")
        return delta("?")

    token = logs.bind(agent_id="agent-1", thread_id="t1", resource_id="r1", turn_id="turn-1")
    try:
        with caplog.at_level(logging.ERROR, logger="memproc.processors.runner"):
            out = runner.run_stream_part(
                [splitter, Spy("picky", process_output_stream=fails_on_text)], delta("x")
            )
    finally:
        logs.unbind(token)
    assert out == [delta("x"), delta("?")]
    (record,) = caplog.records
    assert (record.agent_id, record.thread_id, record.turn_id) == ("agent-1", "t1", "turn-1")
    assert "RuntimeError" in record.exc_text


def test_a_stream_hook_returning_something_else_is_logged_and_the_part_passes_unchanged(caplog):
    _, _, runner = make_runner()
    with caplog.at_level(logging.ERROR, logger="memproc.processors.runner"):
        out = runner.run_stream_part([Spy("odd", process_output_stream=lambda ctx, part: "text")], delta("x"))
        mixed = runner.run_stream_part(
            [Spy("mixed", process_output_stream=lambda ctx, part: [part, "text"])], delta("y")
        )
    assert (out, mixed) == ([delta("x")], [delta("y")])
    assert [r.getMessage() for r in caplog.records] == [
        "memproc: stream processor odd returned 'str', not a StreamEvent or a list of them; ignored",
        "memproc: stream processor mixed returned 'list', not a StreamEvent or a list of them; ignored",
    ]


def test_an_abort_in_a_stream_hook_blocks_the_turn():
    _, _, runner = make_runner()
    with pytest.raises(Blocked) as raised:
        runner.run_stream_part(
            [Spy("guard", process_output_stream=lambda ctx, part: ctx.abort("leak"))], delta("x")
        )
    assert (raised.value.tripwire.reason, raised.value.tripwire.phase) == ("leak", "stream")


# --- hook times and spans ---------------------------------------------------------------------------


def test_each_hook_calls_time_adds_up_on_the_turn_record():
    turn, _, runner = make_runner()

    def slow(ctx, *_):
        time.sleep(0.02)

    spy = Spy("slow", process_input=slow, process_output_stream=lambda ctx, part: part)
    runner.run_input([spy])
    for _ in range(3):
        runner.run_stream_part([spy], delta("x"))
    ms, calls = turn.info.timings[("slow", "process_input")]
    assert calls == 1
    assert 20 <= ms < 2000  # milliseconds: the hook slept 20
    assert turn.info.timings[("slow", "process_output_stream")][1] == 3
    assert set(turn.info.timings) == {("slow", "process_input"), ("slow", "process_output_stream")}


def test_hook_times_are_milliseconds_between_the_clock_readings_around_the_hook(monkeypatch):
    turn, _, runner = make_runner()
    readings = iter([10.0, 10.25, 20.0, 20.5])
    monkeypatch.setattr(time, "perf_counter", lambda: next(readings))
    spy = Spy("spy")
    runner.run_input([spy])
    runner.run_input([spy])
    assert turn.info.timings[("spy", "process_input")] == (750.0, 2)


def test_a_failed_or_aborted_hook_is_timed_too():
    turn, _, runner = make_runner()

    def broken(ctx):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        runner.run_input([Spy("broken", process_input=broken)])
    with pytest.raises(Blocked):
        runner.run_input([Spy("guard", process_input=lambda ctx: ctx.abort())])
    assert {key: calls for key, (_, calls) in turn.info.timings.items()} == {
        ("broken", "process_input"): 1,
        ("guard", "process_input"): 1,
    }


class FakeSpan:
    def __init__(self, name: str, parent: Any, attributes: dict[str, Any]) -> None:
        self.name, self.parent, self.attributes = name, parent, dict(attributes)
        self.exceptions: list[BaseException] = []
        self.status: Any = None
        self.ended = 0

    def set_attributes(self, attributes):
        self.attributes.update(attributes)

    def set_attribute(self, key, value):
        self.attributes[key] = value

    def record_exception(self, exc, attributes=None):
        self.exceptions.append(exc)

    def set_status(self, status, *args):
        self.status = status

    def end(self):
        self.ended += 1


@pytest.fixture
def spans(monkeypatch):
    """The spans the runner starts, through telemetry.start_span (as an SDK would record them)."""
    started: list[FakeSpan] = []

    def start_span(name, *, parent=None, client=False, attributes=None):
        started.append(FakeSpan(name, parent, attributes or {}))
        return started[-1]

    monkeypatch.setattr(telemetry, "start_span", start_span)
    return started


def test_each_hook_call_of_a_traced_turn_is_a_span_under_the_turns(spans):
    turn_span = object()
    _, _, runner = make_runner(trace=turn_span)
    spy = Spy("spy", process_output_stream=lambda ctx, part: part)
    runner.run_input_step([spy], step=2, responses=[])
    runner.run_stream_part([spy], delta("x"))  # stream parts: timed only
    (span,) = spans
    assert span.name == "memproc.processor spy process_input_step"
    assert span.parent is turn_span
    assert span.attributes == {
        "memproc.processor.id": "spy",
        "memproc.processor.hook": "process_input_step",
        "memproc.step": 2,
    }
    assert span.ended == 1
    assert spy.seen[0][1].span is span
    assert spy.seen[1][1].span is telemetry.NO_SPAN


def test_an_untraced_turn_starts_no_span(spans):
    _, _, runner = make_runner(trace=telemetry.NO_SPAN)
    spy = Spy()
    runner.run_input([spy])
    assert spans == []
    assert spy.seen[0][1].span is telemetry.NO_SPAN


def test_an_abort_is_on_its_span_and_an_error_fails_it(spans):
    _, _, runner = make_runner(trace=object())
    with pytest.raises(Blocked):
        runner.run_input([Spy("guard", process_input=lambda ctx: ctx.abort("no", retry=True))])
    aborted = spans[-1]
    assert {k: v for k, v in aborted.attributes.items() if k.startswith("memproc.tripwire")} == {
        "memproc.tripwire.reason": "no",
        "memproc.tripwire.phase": "input",
        "memproc.tripwire.retry": True,
    }
    assert aborted.exceptions == [] and aborted.ended == 1

    def broken(ctx):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        runner.run_input([Spy("broken", process_input=broken)])
    failed = spans[-1]
    assert failed.attributes["error.type"] == "RuntimeError"
    assert [type(e) for e in failed.exceptions] == [RuntimeError]
    assert failed.ended == 1
