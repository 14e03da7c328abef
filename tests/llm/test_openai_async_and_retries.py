"""The OpenAI adapter, natively async (`agenerate`, `astream`), and its bounded retries with backoff
that honour `Retry-After`, against the loopback server through the real `openai` SDK."""

from __future__ import annotations

import asyncio
import time

import pytest
from asgiref.sync import async_to_sync
from django.test import override_settings

from memproc.exceptions import ConfigurationError, ModelRateLimitError, ModelUnavailableError
from memproc.llm.openai import OpenAIChatModel
from memproc.llm.types import ModelRequest, ToolSpec
from memproc.messages import Message
from memproc.testing.openai_server import OpenAICompatibleServer

WEATHER = ToolSpec(
    name="get_weather",
    description="The weather in a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


def model_for(server: OpenAICompatibleServer, **options) -> OpenAIChatModel:
    return OpenAIChatModel("test-model", base_url=server.base_url, api_key="test-key", **options)


def ask(text: str = "Hello there") -> ModelRequest:
    return ModelRequest(messages=[Message.create("user", text)], tools=[WEATHER])


def run(coro_fn):
    return async_to_sync(coro_fn)()


# --- async ----------------------------------------------------------------------------------------


def test_agenerate_answers_like_generate(server):
    server.enqueue("Hello from async")

    async def go():
        return await model_for(server).agenerate(ask())

    assert run(go).text == "Hello from async"


def test_astream_yields_deltas_tool_calls_and_finish(server):
    server.enqueue(
        {
            "content": "Let me check",
            "tool_calls": [{"id": "c1", "name": "get_weather", "arguments": {"city": "Oslo"}}],
        }
    )

    async def go():
        return [e async for e in model_for(server).astream(ask())]

    events = run(go)
    assert "".join(e.text for e in events if e.type == "text-delta") == "Let me check"
    calls = [e.tool_call for e in events if e.type == "tool-call"]
    assert [(c.id, c.name, dict(c.args)) for c in calls] == [("c1", "get_weather", {"city": "Oslo"})]
    assert events[-1].type == "finish"


def test_concurrent_agenerate_calls_overlap(server):
    server.delay = 0.5
    model = model_for(server)

    async def go():
        start = time.perf_counter()
        results = await asyncio.gather(*(model.agenerate(ask(f"q{i}")) for i in range(10)))
        return results, time.perf_counter() - start

    results, wall = run(go)
    assert sorted(r.text for r in results) == sorted(f"Echo: q{i}" for i in range(10))
    assert wall < 2.5, f"10 calls of 0.5 s took {wall:.2f} s"


def test_astream_cut_off_midway_is_unavailable(server):
    server.enqueue({"content": "This answer will be cut off halfway through", "disconnect_after": 3})

    async def go():
        return [e async for e in model_for(server, max_retries=0).astream(ask())]

    with pytest.raises(ModelUnavailableError, match="ended before the model finished"):
        run(go)


# --- retries --------------------------------------------------------------------------------------


def test_a_429_with_retry_after_is_retried_after_the_delay(server):
    server.enqueue({"status": 429, "message": "Slow down", "headers": {"Retry-After": "1"}})
    server.enqueue("Now it works")
    start = time.perf_counter()
    assert model_for(server).generate(ask()).text == "Now it works"
    assert time.perf_counter() - start >= 0.9
    assert len(server.requests) == 2


def test_async_retries_too(server):
    server.enqueue({"status": 429, "message": "Slow down", "headers": {"Retry-After": "1"}})
    server.enqueue("Async retried")

    async def go():
        start = time.perf_counter()
        response = await model_for(server).agenerate(ask())
        return response, time.perf_counter() - start

    response, waited = run(go)
    assert response.text == "Async retried" and waited >= 0.9


def test_5xx_is_retried_with_backoff_then_gives_up(server):
    for _ in range(3):
        server.enqueue({"status": 503, "message": "Overloaded"})
    with pytest.raises(ModelUnavailableError, match="503"):
        model_for(server, max_retries=2).generate(ask())
    assert len(server.requests) == 3  # the first try and two retries


def test_a_stream_is_retried_only_before_its_first_chunk(server):
    server.enqueue({"status": 500, "message": "Boom"})
    server.enqueue("Streamed after a retry")
    events = list(model_for(server).stream(ask()))
    assert "".join(e.text for e in events if e.type == "text-delta") == "Streamed after a retry"
    assert len(server.requests) == 2

    server.reset()
    server.enqueue({"content": "Half an answer that stops", "disconnect_after": 2})
    server.enqueue("never sent")
    with pytest.raises(ModelUnavailableError):
        list(model_for(server).stream(ask()))
    assert len(server.requests) == 1  # deltas were out: no retry


def test_a_rate_limit_that_outlasts_the_retries_is_a_rate_limit_error(server):
    for _ in range(2):
        server.enqueue({"status": 429, "message": "Slow down", "headers": {"Retry-After": "0.1"}})
    with pytest.raises(ModelRateLimitError):
        model_for(server, max_retries=1).generate(ask())
    assert len(server.requests) == 2


def test_max_retries_comes_from_the_provider_settings(server):
    model = OpenAIChatModel("test-model")
    settings = {"openai": {"api_key": "test-key", "base_url": server.base_url, "max_retries": 0}}
    server.enqueue({"status": 500, "message": "Boom"})
    with override_settings(MEMPROC={"MODELS": settings}), pytest.raises(ModelUnavailableError):
        model.generate(ask())
    assert len(server.requests) == 1


@pytest.mark.parametrize("bad", [-1, 11, "3", True])
def test_bad_max_retries_is_a_configuration_error(bad):
    with pytest.raises(ConfigurationError, match="max_retries"):
        OpenAIChatModel("m", base_url="http://127.0.0.1:1/v1", max_retries=bad)
