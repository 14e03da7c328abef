"""Issue 38 item 3: `Parallel(a, b)` runs its members' hooks at the same time, under the sync and
the async drivers; the first abort wins, errors propagate, and members may only check."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from asgiref.sync import async_to_sync
from django.db import connections

from memproc import Agent, Memory
from memproc.exceptions import ConfigurationError, ValidationError
from memproc.models import Message as StoredMessage
from memproc.processors import MessageHistory, Parallel
from memproc.testing import ScriptedModel

pytestmark = pytest.mark.django_db(transaction=True)

JUDGE = 0.5  # seconds each judge takes
BOUND = 0.85  # two judges side by side: about JUDGE; one after the other would be 2 * JUDGE


class SyncJudge:
    """A judge-model guardrail stand-in: takes JUDGE seconds, then passes or aborts."""

    def __init__(self, id: str, *, verdict: str = "pass", wait: float = JUDGE) -> None:
        self.id = id
        self.verdict = verdict
        self.wait = wait
        self.finished = threading.Event()

    def _judge(self, ctx):
        time.sleep(self.wait)
        self.finished.set()
        if self.verdict == "abort":
            ctx.abort(f"{self.id} says no", metadata={"judge": self.id})
        if self.verdict == "error":
            raise RuntimeError(f"{self.id} broke")
        return None

    def process_input(self, ctx):
        return self._judge(ctx)

    def process_output_result(self, ctx):
        return self._judge(ctx)


class AsyncJudge(SyncJudge):
    def __init__(self, id: str, **kwargs) -> None:
        super().__init__(id, **kwargs)
        self.cancelled = False

    async def _ajudge(self, ctx):
        try:
            await asyncio.sleep(self.wait)
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        return self._judge_now(ctx)

    def _judge_now(self, ctx):
        self.finished.set()
        if self.verdict == "abort":
            ctx.abort(f"{self.id} says no", metadata={"judge": self.id})
        if self.verdict == "error":
            raise RuntimeError(f"{self.id} broke")
        return None

    async def process_input(self, ctx):
        return await self._ajudge(ctx)

    async def process_output_result(self, ctx):
        return await self._ajudge(ctx)


def agent_with(**kwargs) -> Agent:
    kwargs.setdefault("model", "local/echo")
    return Agent(id="parallel", instructions="Be brief.", memory=Memory(last_messages=10), **kwargs)


def run(agent: Agent, text: str, driver: str, **options):
    """One turn through `driver`; returns (result, seconds)."""
    start = time.perf_counter()
    try:
        if driver == "generate":
            result = agent.generate(text, thread_id="t", resource_id="r", **options)
        else:
            result = async_to_sync(agent.agenerate)(text, thread_id="t", resource_id="r", **options)
    finally:
        connections.close_all()
    return result, time.perf_counter() - start


DRIVERS = ["generate", "agenerate"]
KINDS = [pytest.param(SyncJudge, id="sync-hooks"), pytest.param(AsyncJudge, id="async-hooks")]


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("judge", KINDS)
def test_two_judges_in_a_group_cost_one_judge(driver, judge):
    agent = agent_with(input_processors=[Parallel(judge("judge-a"), judge("judge-b"))])
    run(agent, "warm up", driver)  # threads, loops and the SDK-free model built once

    result, seconds = run(agent, "Hello", driver)

    assert result.tripwire is None and result.text
    assert seconds < BOUND, f"two {JUDGE}s judges took {seconds:.2f}s: they ran one after another"


@pytest.mark.parametrize("driver", DRIVERS)
def test_output_judges_run_side_by_side_too(driver):
    agent = agent_with(output_processors=[Parallel(SyncJudge("judge-a"), AsyncJudge("judge-b"))])
    run(agent, "warm up", driver)
    result, seconds = run(agent, "Hello", driver)
    assert result.tripwire is None
    assert seconds < BOUND, f"{seconds:.2f}s"


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("judge", KINDS)
def test_the_first_abort_wins_without_waiting_for_the_others(driver, judge):
    slow = judge("slow", wait=2.0)
    quick = judge("quick", verdict="abort", wait=0.05)
    agent = agent_with(input_processors=[Parallel(slow, quick)])

    result, seconds = run(agent, "Hello", driver)

    assert result.tripwire is not None
    assert (result.tripwire.processor_id, result.tripwire.phase) == ("quick", "input")
    assert result.tripwire.reason == "quick says no" and result.tripwire.metadata == {"judge": "quick"}
    assert seconds < 1.0, "the group waited for the slow member after the abort"
    if judge is AsyncJudge:
        assert slow.cancelled
    assert StoredMessage.objects.count() == 0


def test_an_abort_on_output_blocks_the_turn_and_saves_nothing():
    agent = agent_with(
        output_processors=[Parallel(SyncJudge("a", wait=0.01), SyncJudge("b", verdict="abort", wait=0.01))]
    )
    result, _ = run(agent, "Hello", "generate")
    assert (result.tripwire.processor_id, result.tripwire.phase) == ("b", "output")
    assert result.text == "" and StoredMessage.objects.count() == 0


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("judge", KINDS)
def test_an_error_in_a_member_fails_the_turn(driver, judge):
    agent = agent_with(
        input_processors=[Parallel(judge("fine", wait=0.01), judge("broken", verdict="error", wait=0.01))]
    )
    with pytest.raises(RuntimeError, match="broken broke"):
        run(agent, "Hello", driver)
    assert StoredMessage.objects.count() == 0


def test_a_member_that_changes_the_messages_is_refused_when_it_runs():
    class Rewrites:
        id = "rewrites"

        def process_input(self, ctx):
            return [m.replace(parts=()) for m in ctx.messages]

    agent = agent_with(input_processors=[Parallel(SyncJudge("a", wait=0.0), Rewrites())])
    with pytest.raises(ConfigurationError, match="'rewrites' in parallel\\(a,rewrites\\) changed"):
        agent.generate("Hello", thread_id="t", resource_id="r")


def test_a_member_may_return_what_it_was_given():
    class Echoes:
        id = "echoes"

        def process_input(self, ctx):
            return list(ctx.messages)

    agent = agent_with(input_processors=[Parallel(Echoes(), SyncJudge("a", wait=0.0))])
    assert agent.generate("Hello", thread_id="t", resource_id="r").tripwire is None


def test_a_group_sits_in_the_order_like_one_processor():
    seen: list[str] = []

    class Before:
        id = "before"

        def process_input(self, ctx):
            seen.append("before")
            return [*ctx.messages]

    class Member:
        def __init__(self, id):
            self.id = id

        def process_input(self, ctx):
            seen.append(f"{self.id}:{ctx.messages[-1].text}:{ctx.processor_id}")
            ctx.state["calls"] = ctx.state.get("calls", 0) + 1

    agent = agent_with(input_processors=[Before(), Parallel(Member("m1"), Member("m2"))])
    agent.generate("Hello", thread_id="t", resource_id="r")
    assert seen[0] == "before" and sorted(seen[1:]) == ["m1:Hello:m1", "m2:Hello:m2"]


def test_stream_hooks_of_members_run_in_list_order():
    class Tag:
        def __init__(self, id):
            self.id = id

        def process_output_stream(self, ctx, part):
            if part.type == "text-delta":
                return type(part)(type="text-delta", text=part.text + f"[{self.id}]")
            return part

        def process_output_result(self, ctx):
            return None

    model = ScriptedModel(["Hi"])
    agent = agent_with(model=model, output_processors=[Parallel(Tag("a"), Tag("b"))])
    deltas = [e.text for e in agent.stream("Hello", thread_id="t", resource_id="r") if e.type == "text-delta"]
    assert "".join(deltas) == "Hi[a][b]"


def test_a_group_needs_the_strictest_stream_policy_of_its_members():
    class NeedsHold:
        id = "needs-hold"
        needs_stream_policy = "hold"

        def process_output_result(self, ctx):
            return None

    agent = agent_with(output_processors=[Parallel(NeedsHold(), SyncJudge("a"))])
    assert agent.plan().stream_policy == "hold"


@pytest.mark.parametrize(
    "members, message",
    [
        ((), "at least one processor"),
        ((Parallel(SyncJudge("a")),), "cannot hold another Parallel"),
        ((MessageHistory(last_messages=3),), "memory processor 'message-history'"),
        ((object(),), "is not a processor"),
    ],
    ids=["empty", "nested", "memory", "not-a-processor"],
)
def test_groups_that_cannot_be_merged_are_refused_when_built(members, message):
    with pytest.raises(ConfigurationError, match=message):
        Parallel(*members)


def test_per_call_lists_are_checked_too():
    agent = agent_with()
    with pytest.raises(ValidationError, match="is not a processor"):
        agent.generate("Hello", thread_id="t", resource_id="r", input_processors=[object()])


def test_each_members_time_is_recorded_with_the_groups():
    agent = agent_with(
        input_processors=[Parallel(SyncJudge("judge-a", wait=0.05), SyncJudge("judge-b", wait=0.05))]
    )
    result, _ = run(agent, "Hello", "generate")
    timings = result.memory["processors"]
    for key in ("judge-a process_input", "judge-b process_input", "parallel(judge-a,judge-b) process_input"):
        total_ms, calls = timings[key]
        assert calls == 1 and total_ms >= 40
