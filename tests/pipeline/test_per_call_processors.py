"""Issue 38 item 4: `input_processors=` / `output_processors=` per call replace the agent's lists for
that call only; memory's processors stay where memory puts them (DESIGN §2 rules 1-3)."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from django.db import connections

from memproc import Agent, Memory
from memproc.exceptions import ValidationError
from memproc.models import Message as StoredMessage
from memproc.processors import MessageHistory

pytestmark = pytest.mark.django_db(transaction=True)

T, R = "t-per-call", "r-per-call"


class Marker:
    """Records which hooks of which processor ran."""

    def __init__(self, id: str, log: list[str]) -> None:
        self.id = id
        self.log = log

    def process_input(self, ctx):
        self.log.append(f"{self.id}:input")

    def process_output_result(self, ctx):
        self.log.append(f"{self.id}:output")


@pytest.fixture
def log() -> list[str]:
    return []


@pytest.fixture
def agent(log) -> Agent:
    return Agent(
        id="per-call",
        instructions="Be brief.",
        model="local/echo",
        memory=Memory(last_messages=10),
        input_processors=[Marker("agent-in", log)],
        output_processors=[Marker("agent-out", log)],
    )


def run(agent: Agent, text: str, driver: str, **options):
    try:
        if driver == "generate":
            return agent.generate(text, thread_id=T, resource_id=R, **options)
        if driver == "stream":
            return list(agent.stream(text, thread_id=T, resource_id=R, **options))[-1].result
        if driver == "agenerate":
            return async_to_sync(agent.agenerate)(text, thread_id=T, resource_id=R, **options)

        async def collect():
            return [e async for e in agent.astream(text, thread_id=T, resource_id=R, **options)]

        return async_to_sync(collect)()[-1].result
    finally:
        connections.close_all()


@pytest.mark.parametrize("driver", ["generate", "stream", "agenerate", "astream"])
def test_a_calls_lists_replace_the_agents_for_that_call_only(agent, log, driver):
    run(
        agent,
        "one",
        driver,
        input_processors=[Marker("call-in", log)],
        output_processors=[Marker("call-out", log)],
    )
    assert log == ["call-in:input", "call-out:output"]

    log.clear()
    run(agent, "two", driver)
    assert log == ["agent-in:input", "agent-out:output"]


def test_memory_processors_stay_with_a_calls_lists(agent, log):
    run(agent, "first", "generate")
    result = run(agent, "second", "generate", input_processors=[], output_processors=[])

    assert log == ["agent-in:input", "agent-out:output"]  # the first call only
    assert [m.text for m in result.prompt if m.role == "user"] == ["first", "second"]  # history loaded
    assert list(StoredMessage.objects.order_by("sequence").values_list("role", flat=True)) == [
        "user",
        "assistant",
        "user",
        "assistant",
    ]  # and the turn saved


def test_a_memory_processor_in_a_calls_list_replaces_the_automatic_one_on_that_side(agent):
    for text in ("a", "b", "c"):
        run(agent, text, "generate")
    result = run(agent, "d", "generate", input_processors=[MessageHistory(last_messages=2)])
    seen = [m for m in result.prompt if m.role != "system"]
    assert [(m.role, m.text if m.role == "user" else "") for m in seen] == [
        ("user", "c"),
        ("assistant", ""),
        ("user", "d"),
    ]  # the call's window of 2, not memory's 10
    assert StoredMessage.objects.count() == 8  # the automatic one still saves on output


def test_a_calls_output_list_settles_the_calls_stream_policy(agent):
    class NeedsSentences:
        id = "needs-sentences"
        needs_stream_policy = "sentences"

        def process_output_result(self, ctx):
            return None

    assert agent.plan().stream_policy == "live"
    assert agent.plan(output_processors=[NeedsSentences()]).stream_policy == "sentences"
    with pytest.raises(ValidationError, match="stream_policy='live' would stream text"):
        list(
            agent.stream(
                "x", thread_id=T, resource_id=R, output_processors=[NeedsSentences()], stream_policy="live"
            )
        )


@pytest.mark.parametrize("bad", ["not a list", [object()], [None]])
def test_bad_lists_are_refused_before_the_turn(agent, bad):
    with pytest.raises(ValidationError):
        agent.generate("x", thread_id=T, resource_id=R, input_processors=bad)
    assert StoredMessage.objects.count() == 0
