"""Issue 32: TokenLimiter fits every model call of a tool loop, not only the first (as Mastra's does)."""

from __future__ import annotations

import pytest

from memproc import Memory, tool
from memproc.llm.types import ModelResponse, ToolCall
from memproc.processors import TokenLimiter
from memproc.processors.tokens import get_token_counter

pytestmark = pytest.mark.django_db
T, R = "loop", "user-1"


@tool
def fetch(page: int) -> str:
    """Returns a long page."""
    return f"page {page}: " + "lorem ipsum dolor sit amet " * 30


def prompt_tokens(request) -> int:
    counter = get_token_counter()
    return sum(counter.count_message(m) for m in request.messages) + TokenLimiter.reply_tokens


def loop(n: int) -> list:
    return [ModelResponse(tool_calls=[ToolCall(f"c{i}", "fetch", {"page": i})]) for i in range(n)] + ["done"]


def test_every_call_of_a_tool_loop_fits_the_limit_by_dropping_history(make_agent, model):
    agent = make_agent(memory=Memory(last_messages=40), tools=[fetch])
    model.add(*[f"answer {i} " + "words " * 40 for i in range(6)])
    for i in range(6):  # a long history to drop from
        agent.generate(f"question {i} " + "words " * 40, thread_id=T, resource_id=R)
    limited = make_agent(memory=Memory(last_messages=40), tools=[fetch], input_processors=[TokenLimiter(700)])
    model.requests.clear()
    model.add(*loop(2))

    result = limited.generate("read two pages", thread_id=T, resource_id=R)

    assert result.tripwire is None
    assert len(model.requests) == 3
    sizes = [prompt_tokens(r) for r in model.requests]
    assert all(size <= 700 for size in sizes), sizes
    histories = [
        [m.text for m in r.messages if m.role in ("user", "assistant") and m.text][:-1]
        for r in model.requests
    ]
    assert len(histories[2]) < len(histories[0])  # later calls dropped older history to make room
    assert histories[2] == histories[0][len(histories[0]) - len(histories[2]) :]  # the newest kept


def test_a_tool_loop_that_outgrows_the_limit_aborts_before_the_call_and_saves_nothing(make_agent, model):
    agent = make_agent(memory=Memory(last_messages=10), tools=[fetch], input_processors=[TokenLimiter(400)])
    model.add(*loop(3))

    result = agent.generate("read three pages", thread_id=T, resource_id=R)

    assert result.tripwire is not None
    assert (result.tripwire.processor_id, result.tripwire.phase) == ("token-limiter", "input_step")
    assert result.tripwire.metadata["step"] >= 1
    assert all(prompt_tokens(r) <= 400 for r in model.requests)
    assert Memory().recall(thread_id=T, resource_id=R) == []
