"""Parallel groups without a database or an agent: members run at the same time (each waits for the
other at a barrier, so one after the other would never get past it), the first abort wins, members
may only check, and what a group refuses when built or when it runs, in the words the caller reads."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from memproc import logs, telemetry
from memproc.events import StreamEvent
from memproc.exceptions import ConfigurationError, ModelError, ValidationError
from memproc.llm.types import ModelRequest
from memproc.messages import ToolResultPart
from memproc.processors import parallel
from memproc.processors.conversation import Conversation
from memproc.processors.parallel import Parallel, check_processors, with_hook
from memproc.processors.runner import Blocked, ProcessorRunner
from memproc.processors.turn import Turn
from memproc.tools import Tool
from tests.processors.conftest import assistant, make_ctx, system, user

WAIT = 5  # seconds a member waits for the other before the test fails: never reached when parallel


def a_tool(name: str) -> Tool:
    return Tool(name, f"{name} things", {"type": "object", "properties": {}}, lambda: "ok")


def make_runner(*, tools: tuple[Tool, ...] = ()) -> tuple[Turn, ProcessorRunner]:
    new = [user("hello", id="in-1")]
    turn = Turn(
        agent=None, thread_id="t1", resource_id="r1", store=None, input_messages=new, trace=telemetry.NO_SPAN
    )
    for tool in tools:
        turn.add_tool(tool)
    conversation = Conversation(system=[system("sys", id="sys")], messages=new, loaded_ids=turn.loaded_ids)
    return turn, ProcessorRunner(turn, conversation)


class Check:
    """A sync member: runs `body(ctx, *args)` in each hook it has, records what it saw."""

    def __init__(self, id: str, body: Any = None, *, hooks: tuple[str, ...] = ("process_input",)) -> None:
        self.id = id
        self.body = body
        self.seen: list[Any] = []
        self.threads: list[str] = []
        for hook in hooks:
            setattr(self, hook, self._make(hook))

    def _make(self, hook: str) -> Any:
        def call(ctx: Any, *args: Any) -> Any:
            self.seen.append((hook, ctx, args))
            self.threads.append(threading.current_thread().name)
            return self.body(ctx, *args) if self.body else None

        return call


class AsyncCheck:
    """An `async def` member of process_input."""

    def __init__(self, id: str, body: Any = None) -> None:
        self.id = id
        self.body = body
        self.seen: list[Any] = []
        self.cancelled = False

    async def process_input(self, ctx: Any) -> Any:
        self.seen.append(ctx)
        try:
            return await self.body(ctx) if self.body else None
        except asyncio.CancelledError:
            self.cancelled = True
            raise


# --- built ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("members", "message"),
    [
        ((), "Parallel(...) needs at least one processor"),
        (
            (Check("a"), Parallel(Check("b"))),
            "Parallel(...) cannot hold another Parallel: list its processors",
        ),
        (
            (Check("a"), object()),
            "Parallel(...): <object object at ",
        ),
        (
            (Check("a"), Check("message-history")),
            "Parallel(...) cannot hold the memory processor 'message-history': it loads or saves where it "
            "sits in the order",
        ),
        ((Check("semantic-recall"),), "Parallel(...) cannot hold the memory processor 'semantic-recall'"),
        ((Check("working-memory"),), "Parallel(...) cannot hold the memory processor 'working-memory'"),
    ],
)
def test_a_group_that_cannot_be_merged_is_refused_when_built(members, message):
    with pytest.raises(ConfigurationError) as raised:
        Parallel(*members)
    assert str(raised.value).startswith(message)


def test_a_member_that_is_not_a_processor_is_named_in_the_error():
    with pytest.raises(ConfigurationError) as raised:
        Parallel(Check("a"), "judge")
    assert str(raised.value) == "Parallel(...): 'judge' is not a processor: it needs a non-empty string `id`"


def test_a_group_is_named_after_its_members():
    a, b = Check("a"), Check("b")
    group = Parallel(a, b)
    assert group.id == "parallel(a,b)"
    assert group.processors == (a, b)
    assert repr(group) == f"Parallel({a!r}, {b!r})"


def test_a_group_has_a_hook_only_when_a_member_has_it():
    group = Parallel(Check("a"), Check("b", hooks=("process_output_result",)))
    assert group.process_input is not None and group.process_output_result is not None
    assert group.process_input_step is None
    assert group.process_output_step is None
    assert group.process_tool_result is None


@pytest.mark.parametrize(
    ("needs", "strictest"),
    [
        ((None, None), "live"),
        (("live", "sentences"), "sentences"),
        (("hold", "sentences", "live"), "hold"),
        (("sentences", "hold"), "hold"),
        (("hold", "future-policy"), "future-policy"),  # one memproc does not know: the strictest
    ],
)
def test_a_group_needs_the_strictest_stream_policy_of_its_members(needs, strictest):
    members = []
    for i, need in enumerate(needs):
        member = Check(f"m{i}")
        if need is not None:
            member.needs_stream_policy = need
        members.append(member)
    assert Parallel(*members).needs_stream_policy == strictest


def test_check_processors_raises_the_error_asked_for():
    check_processors([Check("a"), Parallel(Check("b"))], error=ValidationError)
    with pytest.raises(ValidationError) as raised:
        check_processors([Check("a"), Check("")], error=ValidationError)
    assert "is not a processor: it needs a non-empty string `id`" in str(raised.value)
    assert isinstance(raised.value.__cause__, TypeError)
    with pytest.raises(ConfigurationError, match="is not a processor"):
        check_processors([3], error=ConfigurationError)


def test_with_hook_keeps_the_chains_processors_that_have_the_hook_and_opens_groups_for_sequential_hooks():
    streamer = Check("streamer", hooks=("process_output_stream", "process_api_error"))
    judge = Check("judge", hooks=("process_input",))
    other = Check("other", hooks=("process_output_stream",))
    group = Parallel(judge, streamer)
    plain = Check("plain", hooks=("process_input", "process_output_stream"))
    chain = [plain, group, other]
    assert with_hook(chain, "process_input") == [plain, group]
    assert with_hook(chain, "process_output_stream") == [plain, streamer, other]
    assert with_hook(chain, "process_api_error") == [streamer]
    assert with_hook(chain, "process_tool_result") == []


# --- run --------------------------------------------------------------------------------------------


def test_sync_members_run_at_the_same_time_in_the_groups_threads():
    barrier = threading.Barrier(2, timeout=WAIT)

    def meet(ctx):
        barrier.wait()  # BrokenBarrierError after WAIT seconds if the other never runs meanwhile

    a, b = Check("a", meet), Check("b", meet)
    turn, runner = make_runner()
    runner.run_input([Parallel(a, b)])
    assert [thread.startswith("memproc-parallel") for thread in a.threads + b.threads] == [True, True]


def test_async_members_run_on_one_loop_beside_sync_ones_in_threads():
    both = threading.Barrier(2, timeout=WAIT)

    async def waits_for_the_other(ctx):
        # The sync member passes the barrier only while this one, on the loop, waits for it too.
        await asyncio.get_running_loop().run_in_executor(None, both.wait)

    def meet(ctx):
        both.wait()

    a = AsyncCheck("a", waits_for_the_other)
    b = Check("b", meet)
    _, runner = make_runner()
    runner.run_input([Parallel(a, b)])
    assert [ctx.processor_id for ctx in a.seen] == ["a"]
    assert [ctx.processor_id for _, ctx, _ in b.seen] == ["b"]
    assert [m.id for m in b.seen[0][1].messages] == ["in-1"]
    assert b.threads[0].startswith("memproc-parallel")


def test_two_async_members_run_concurrently():
    seen: list[str] = []

    def member(name: str, other: str) -> AsyncCheck:
        async def body(ctx):
            seen.append(name)
            for _ in range(WAIT * 100):
                if other in seen:
                    return None
                await asyncio.sleep(0.01)
            raise AssertionError(f"{other} never ran while {name} waited")

        return AsyncCheck(name, body)

    _, runner = make_runner()
    runner.run_input([Parallel(member("a", "b"), member("b", "a"))])
    assert sorted(seen) == ["a", "b"]


def test_each_member_sees_what_the_group_was_given_with_its_own_id_and_state():
    _, runner = make_runner()

    def count(ctx, *_):
        ctx.state["calls"] = ctx.state.get("calls", 0) + 1

    a = Check("a", count, hooks=("process_input", "process_output_result"))
    b = Check("b", count, hooks=("process_input",))
    group = Parallel(a, b)
    runner.run_input([group])
    runner.run_output([group], [assistant("done", id="r-1")])
    (_, first, _), (_, second, _) = a.seen
    assert (first.processor_id, b.seen[0][1].processor_id) == ("a", "b")
    assert [m.id for m in first.messages] == ["in-1"]
    assert [m.id for m in first.system_messages] == ["sys"]
    assert [m.id for m in second.messages] == ["r-1"]
    assert first.state is second.state and first.state == {"calls": 2}
    assert b.seen[0][1].state == {"calls": 1} and b.seen[0][1].state is not first.state


def test_a_bare_call_outside_a_turn_runs_its_members():
    a = Check("a")
    ctx = make_ctx(new=[user("hi", id="u1")])
    assert Parallel(a).process_input(ctx) is None
    assert a.seen[0][1].processor_id == "a"


def test_each_members_time_is_recorded_with_the_groups():
    turn, runner = make_runner()
    slow = Check("slow", lambda ctx: time.sleep(0.02))
    group = Parallel(slow, Check("quick"))
    runner.run_input([group])
    runner.run_input([group])
    ms, calls = turn.info.timings[("slow", "process_input")]
    assert calls == 2
    assert 40 <= ms < 4000  # milliseconds: the member slept 20 each time
    assert turn.info.timings[("quick", "process_input")][1] == 2
    assert turn.info.timings[("parallel(slow,quick)", "process_input")][1] == 2


def test_an_async_members_time_is_recorded_in_milliseconds():
    turn, runner = make_runner()

    async def nap(ctx):
        await asyncio.sleep(0.02)

    runner.run_input([Parallel(AsyncCheck("napper", nap))])
    ms, calls = turn.info.timings[("napper", "process_input")]
    assert calls == 1
    assert 20 <= ms < 2000


def test_members_see_the_callers_context_variables_in_their_threads():
    """A member's log lines carry the turn's fields, whether it runs in a thread alone or beside an
    `async def` member on the loop."""

    def reads_binding(ctx):
        ctx.state["bound"] = logs.current()["turn_id"]

    async def also_async(ctx):
        ctx.state["bound"] = logs.current()["turn_id"]

    sync_only = Check("sync", reads_binding)
    mixed_sync, mixed_async = Check("mixed-sync", reads_binding), AsyncCheck("mixed-async", also_async)
    _, runner = make_runner()
    token = logs.bind(agent_id="a", thread_id="t1", resource_id="r1", turn_id="turn-7")
    try:
        runner.run_input([Parallel(sync_only)])
        runner.run_input([Parallel(mixed_async, mixed_sync)])
    finally:
        logs.unbind(token)
    assert sync_only.seen[0][1].state["bound"] == "turn-7"
    assert mixed_sync.seen[0][1].state["bound"] == "turn-7"
    assert mixed_async.seen[0].state["bound"] == "turn-7"


class AsyncResultCheck:
    """An `async def` member of process_tool_result."""

    def __init__(self, id: str) -> None:
        self.id = id
        self.seen: list[Any] = []

    async def process_tool_result(self, ctx: Any, result: Any) -> Any:
        self.seen.append((ctx.processor_id, result))
        return None


def test_a_mixed_group_gives_each_member_its_context_and_the_tool_result():
    _, runner = make_runner()
    result = ToolResultPart("c1", "lookup", "ok")
    on_loop = AsyncResultCheck("on-loop")
    in_thread = Check("in-thread", lambda ctx, r: None, hooks=("process_tool_result",))
    assert (
        runner.run_tool_result([Parallel(on_loop, in_thread)], step=0, responses=[], result=result) is result
    )
    assert on_loop.seen == [("on-loop", result)]
    ((_, ctx, args),) = in_thread.seen
    assert (ctx.processor_id, args) == ("in-thread", (result,))
    assert in_thread.threads[0].startswith("memproc-parallel")


def test_as_many_members_as_async_threads_run_at_once():
    """ASYNC_THREADS (32 by default) bounds the members running at once: 32 meet at a barrier."""
    barrier = threading.Barrier(32, timeout=WAIT)

    def meet(ctx):
        barrier.wait()

    members = [Check(f"m{i}", meet) for i in range(32)]
    _, runner = make_runner()
    runner.run_input([Parallel(*members)])
    assert all(len(m.seen) == 1 for m in members)


class Clock:
    """time.perf_counter for one test: one second later at each reading."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.lock = threading.Lock()

    def __call__(self) -> float:
        with self.lock:
            self.now += 1.0
            return self.now


def test_member_times_are_recorded_in_milliseconds(monkeypatch):
    turn, runner = make_runner()
    monkeypatch.setattr(parallel.time, "perf_counter", Clock())
    runner.run_input([Parallel(Check("sync"))])

    async def nothing(ctx):
        return None

    runner.run_input([Parallel(AsyncCheck("async", nothing))])
    # Each member's hook: read the clock before and after, one second apart.
    assert turn.info.timings[("sync", "process_input")] == (1000.0, 1)
    assert turn.info.timings[("async", "process_input")] == (1000.0, 1)


# --- the first abort wins ---------------------------------------------------------------------------


def test_the_first_abort_wins_without_waiting_for_a_slow_sync_member():
    release, finished = threading.Event(), threading.Event()

    def slow(ctx):
        release.wait(WAIT)
        finished.set()

    _, runner = make_runner()
    group = Parallel(
        Check("slow", slow), Check("guard", lambda ctx: ctx.abort("no", metadata={"by": "guard"}))
    )
    try:
        with pytest.raises(Blocked) as raised:
            runner.run_input([group])
        assert not finished.is_set()
    finally:
        release.set()
    tripwire = raised.value.tripwire
    assert (tripwire.reason, tripwire.processor_id, tripwire.phase, tripwire.metadata) == (
        "no",
        "guard",
        "input",
        {"by": "guard"},
    )


def test_the_first_abort_cancels_the_async_members_still_running():
    async def slow(ctx):
        await asyncio.sleep(WAIT)

    async def guard(ctx):
        await asyncio.sleep(0)
        ctx.abort("async no")

    waiting = AsyncCheck("slow", slow)
    _, runner = make_runner()
    started = time.perf_counter()
    with pytest.raises(Blocked) as raised:
        runner.run_input([Parallel(waiting, AsyncCheck("guard", guard))])
    assert time.perf_counter() - started < WAIT
    assert raised.value.tripwire.processor_id == "guard"
    assert waiting.cancelled


def test_an_error_in_a_member_fails_the_group():
    def broken(ctx):
        raise RuntimeError("judge broke")

    _, runner = make_runner()
    with pytest.raises(RuntimeError, match="judge broke"):
        runner.run_input([Parallel(Check("ok"), Check("broken", broken))])

    async def abroken(ctx):
        raise RuntimeError("async judge broke")

    with pytest.raises(RuntimeError, match="async judge broke"):
        runner.run_input([Parallel(AsyncCheck("ok"), AsyncCheck("broken", abroken))])


# --- members may only check -------------------------------------------------------------------------


def refusal(member: str, group: str, hook: str) -> str:
    return (
        f"Processor {member!r} in {group} changed what {hook} gave it; the members of a Parallel group "
        "may only check (return None, or abort). Put processors that change messages, tools or "
        "results before or after the group."
    )


def test_a_member_may_return_what_it_was_given():
    _, runner = make_runner()
    same_list = Check(
        "list", lambda ctx: list(ctx.messages), hooks=("process_input", "process_output_result")
    )
    same_tuple = Check(
        "tuple", lambda ctx: tuple(ctx.messages), hooks=("process_input", "process_output_result")
    )
    runner.run_input([Parallel(same_list, same_tuple)])
    assert runner.run_output([Parallel(same_list, same_tuple)], [assistant("a", id="r")])[0].id == "r"
    result = ToolResultPart("c1", "lookup", "ok")
    echo = Check("echo", lambda ctx, r: ToolResultPart("c1", "lookup", "ok"), hooks=("process_tool_result",))
    assert runner.run_tool_result([Parallel(echo)], step=0, responses=[], result=result) == result


@pytest.mark.parametrize("hook", ["process_input", "process_output_result", "process_output_step"])
def test_a_member_that_changes_the_messages_is_refused_when_it_runs(hook):
    _, runner = make_runner()
    rewrites = Check("rewrites", lambda ctx: [*ctx.messages, user("extra", id="x")], hooks=(hook,))
    group = Parallel(Check("a", hooks=(hook,)), rewrites)
    with pytest.raises(ConfigurationError) as raised:
        if hook == "process_input":
            runner.run_input([group])
        elif hook == "process_output_result":
            runner.run_output([group], [assistant("a", id="r")])
        else:
            runner.run_output_step([group], step=0, responses=[assistant("a", id="r")], tool_calls=[])
    assert str(raised.value) == refusal("rewrites", "parallel(a,rewrites)", hook)


def test_a_member_returning_something_other_than_a_list_is_refused():
    _, runner = make_runner()
    with pytest.raises(ConfigurationError, match="'odd' in parallel\\(odd\\) changed what process_input"):
        runner.run_input([Parallel(Check("odd", lambda ctx: "in-1"))])
    with pytest.raises(ConfigurationError, match="'fewer' in parallel\\(fewer\\)"):
        runner.run_input([Parallel(Check("fewer", lambda ctx: []))])


def test_a_member_that_changes_a_tool_result_is_refused():
    _, runner = make_runner()
    result = ToolResultPart("c1", "lookup", "ok")
    redacts = Check(
        "redacts", lambda ctx, r: ToolResultPart("c1", "lookup", "[x]"), hooks=("process_tool_result",)
    )
    with pytest.raises(ConfigurationError) as raised:
        runner.run_tool_result([Parallel(redacts)], step=0, responses=[], result=result)
    assert str(raised.value) == refusal("redacts", "parallel(redacts)", "process_tool_result")
    lists = Check("lists", lambda ctx, r: [r], hooks=("process_tool_result",))
    with pytest.raises(ConfigurationError, match="'lists'"):
        runner.run_tool_result([Parallel(lists)], step=0, responses=[], result=result)


def test_an_input_step_member_may_read_but_not_change_the_system_messages_or_tools():
    _, runner = make_runner(tools=(a_tool("lookup"), a_tool("search")))
    reader = Check(
        "reader",
        lambda ctx: list(ctx.messages) if ctx.tools and ctx.system_messages else None,
        hooks=("process_input_step",),
    )
    view = runner.run_input_step([Parallel(reader)], step=1, responses=[])
    assert [t.name for t in view.tools] == ["lookup", "search"]
    assert reader.seen[0][1].step == 1

    def adds_tool(ctx):
        ctx.tools.append(a_tool("extra"))

    def drops_tool(ctx):
        ctx.tools = ctx.tools[:1]

    def adds_system(ctx):
        ctx.system_messages = [*ctx.system_messages, system("more", id="more")]

    for name, body in (("adds_tool", adds_tool), ("drops_tool", drops_tool), ("adds_system", adds_system)):
        member = Check(name, body, hooks=("process_input_step",))
        with pytest.raises(ConfigurationError) as raised:
            runner.run_input_step([Parallel(member)], step=1, responses=[])
        assert str(raised.value) == refusal(name, f"parallel({name})", "process_input_step")
    # The group's own lists were left as they were.
    view = runner.run_input_step([], step=2, responses=[])
    assert [t.name for t in view.tools] == ["lookup", "search"]


def test_members_get_their_own_copy_of_a_system_message_list_a_context_was_built_with():
    """A context built by hand may hold a list: a member cannot change it in place (its copy is a
    tuple), so the group's check compares against what the group was given."""
    from memproc.processors.base import ProcessorContext

    given = [system("sys", id="sys")]
    ctx = ProcessorContext(processor_id="group", messages=(user("hi", id="u1"),), system_messages=given)

    def appends(ctx):
        ctx.system_messages.append(system("more", id="more"))

    with pytest.raises(AttributeError):
        Parallel(Check("appends", appends, hooks=("process_input_step",))).process_input_step(ctx)
    assert [m.id for m in given] == ["sys"]


def test_a_member_that_changes_the_system_messages_outside_input_steps_is_not_checked_for_it():
    """Only an input step reads ctx.system_messages back; elsewhere an assignment changes nothing."""
    _, runner = make_runner()

    def assigns(ctx):
        ctx.system_messages = []

    runner.run_input([Parallel(Check("assigns", assigns))])


# --- sequential hooks -------------------------------------------------------------------------------


def test_stream_and_api_error_hooks_of_members_run_one_after_another_in_list_order():
    _, runner = make_runner()
    first = Check(
        "first",
        lambda ctx, part: StreamEvent("text-delta", text=part.text + "1"),
        hooks=("process_output_stream",),
    )
    second = Check(
        "second",
        lambda ctx, part: StreamEvent("text-delta", text=part.text + "2"),
        hooks=("process_output_stream",),
    )
    group = Parallel(first, Check("judge"), second)
    assert runner.run_stream_part([group], StreamEvent("text-delta", text="x")) == [
        StreamEvent("text-delta", text="x12")
    ]
    request = ModelRequest(messages=[user("long", id="u")])
    shorter = ModelRequest(messages=[user("short", id="u2")])
    fixer = Check("fixer", lambda ctx, error: shorter, hooks=("process_api_error",))
    reader = Check("reader", hooks=("process_api_error",))
    assert (
        runner.run_api_error([Parallel(fixer, reader)], step=0, request=request, error=ModelError("x"))
        is shorter
    )
    assert reader.seen[0][1].request is shorter
