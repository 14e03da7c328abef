"""An agent with tools, through the real OpenAI SDK, against the loopback server made strict: as its
history window and recall move across tool turns, the provider never gets an orphan tool message
(the real API answers those with HTTP 400)."""

from __future__ import annotations

import pytest

from memproc import Agent, Memory, tool
from memproc.llm.openai import OpenAIChatModel
from memproc.processors import MessageHistory, TokenLimiter, ToolCallFilter
from memproc.testing import HashEmbedder
from memproc.testing.openai_server import OpenAICompatibleServer

pytestmark = pytest.mark.django_db

TURNS = 12


@tool
def weather(city: str) -> dict:
    """The weather in a city."""
    return {"city": city, "sky": "grey"}


@pytest.fixture
def server():
    with OpenAICompatibleServer(api_key="test-key") as srv:
        yield srv


def script_turn(server: OpenAICompatibleServer, i: int) -> None:
    """Every other turn calls the tool (sometimes twice in one step) before answering."""
    if i % 2 == 0:
        calls = [
            {"id": f"call-{i}-{k}", "name": "weather", "arguments": {"city": f"City {i}"}}
            for k in range(1 + i % 3)
        ]
        server.enqueue({"tool_calls": calls})
    server.enqueue(f"Answer {i}")


@pytest.mark.parametrize(
    "memory, input_processors",
    [
        (Memory(last_messages=4), []),
        (Memory(last_messages=3, semantic_recall={"top_k": 3, "message_range": 1, "scope": "thread"}), []),
        (Memory(last_messages=2, semantic_recall={"enabled": True, "top_k": 2, "message_range": 2}), []),
        (Memory(last_messages=8), [MessageHistory(last_messages=5), TokenLimiter(300)]),
        (
            Memory(last_messages=5, semantic_recall={"top_k": 4, "message_range": 1, "scope": "thread"}),
            [ToolCallFilter(exclude=["other"]), MessageHistory(last_messages=3), TokenLimiter(250)],
        ),
    ],
    ids=["window", "window+recall", "small-window+wide-recall", "hand-placed+limiter", "everything"],
)
@pytest.mark.parametrize("streaming", [False, True], ids=["generate", "stream"])
def test_moving_windows_never_send_an_orphan_tool_message(server, memory, input_processors, streaming):
    agent = Agent(
        id="strict",
        instructions="You answer questions about the weather.",
        model=OpenAIChatModel("test-model", base_url=server.base_url, api_key="test-key"),
        memory=Memory(
            last_messages=memory.last_messages,
            semantic_recall=memory.recall_options or False,
            embedder=HashEmbedder(dimensions=32),
        ),
        tools=[weather],
        input_processors=input_processors,
    )
    for i in range(TURNS):
        script_turn(server, i)
        text = f"What about City {i}? Also remember City {max(0, i - 3)}."
        if streaming:
            events = list(agent.stream(text, thread_id="t-strict", resource_id="r-strict"))
            result = events[-1].result
        else:
            result = agent.generate(text, thread_id="t-strict", resource_id="r-strict")
        assert result.text == f"Answer {i}", server.rejected
    assert server.rejected == []
    sent_tool_turns = [m for body in server.requests for m in body["messages"] if m["role"] == "tool"]
    assert sent_tool_turns, "history and recall should have carried some tool results"
