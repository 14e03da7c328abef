"""DESIGN §8 async-native turns: concurrent agenerate/astream calls overlap in one process, with sync
and async models, on SQLite and PostgreSQL; cancelling a streamed turn saves nothing."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import AsyncIterator, Iterator

import pytest
from asgiref.sync import async_to_sync
from django.db import connections

from memproc import Agent, Memory
from memproc.events import StreamEvent
from memproc.llm.types import ModelRequest, ModelResponse
from memproc.models import Message as StoredMessage

pytestmark = pytest.mark.django_db(transaction=True)

WAIT = 0.5


class SleepyModel:
    """A sync-only model that waits WAIT seconds, then answers with the last user text."""

    id = "test/sleepy"

    def __init__(self) -> None:
        self.active = 0
        self.peak = 0
        self._lock = threading.Lock()

    def generate(self, request: ModelRequest) -> ModelResponse:
        with self._lock:
            self.active += 1
            self.peak = max(self.peak, self.active)
        time.sleep(WAIT)
        with self._lock:
            self.active -= 1
        return ModelResponse(text="re: " + request.messages[-1].text)

    def stream(self, request: ModelRequest) -> Iterator[StreamEvent]:
        text = self.generate(request).text
        for word in text.split(" "):
            yield StreamEvent(type="text-delta", text=word + " ")
        yield StreamEvent(type="finish", usage={}, finish_reason="stop")


class AsyncModel:
    """A natively async model: `agenerate` and `astream` await the wait on the event loop."""

    id = "test/async"

    def __init__(self, delta_gap: float = 0.05) -> None:
        self.delta_gap = delta_gap
        self.threads: set[str] = set()
        self.active = 0  # one event loop: no lock needed
        self.peak = 0

    def generate(self, request: ModelRequest) -> ModelResponse:
        raise AssertionError("the async driver must await agenerate")

    async def agenerate(self, request: ModelRequest) -> ModelResponse:
        self.threads.add(threading.current_thread().name)
        await asyncio.sleep(WAIT)
        return ModelResponse(text="re: " + request.messages[-1].text)

    async def astream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        self.active += 1
        self.peak = max(self.peak, self.active)
        await asyncio.sleep(WAIT)
        self.active -= 1
        for word in ("re:", request.messages[-1].text):
            yield StreamEvent(type="text-delta", text=word + " ")
            await asyncio.sleep(self.delta_gap)
        yield StreamEvent(type="finish", usage={}, finish_reason="stop")


def agent_with(model, agent_id="async-agent") -> Agent:
    return Agent(id=agent_id, instructions="Be brief.", model=model, memory=Memory(last_messages=10))


def run(coro):
    async def main():
        return await coro

    try:
        return async_to_sync(main)()
    finally:
        connections.close_all()


async def timed(coros):
    start = time.perf_counter()
    results = await asyncio.gather(*coros)
    return results, time.perf_counter() - start


def db_params():
    return [
        pytest.param("sqlite", id="sqlite"),
        pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
    ]


@pytest.mark.parametrize("db", db_params())
def test_concurrent_agenerate_with_a_sync_model_overlaps(db):
    model = SleepyModel()
    agent = agent_with(model)
    n = 6
    results, wall = run(timed(agent.agenerate(f"q{i}", thread_id=f"t{i}", resource_id="r") for i in range(n)))
    assert [r.text for r in results] == [f"re: q{i}" for i in range(n)]
    assert model.peak > 1  # calls in flight at once: overlap, whatever the machine's load
    assert wall < n * WAIT, f"{n} turns of {WAIT}s took {wall:.2f}s: they ran one after another"
    assert StoredMessage.objects.count() == 2 * n


@pytest.mark.parametrize("db", db_params())
def test_concurrent_agenerate_with_an_async_model_overlaps(db):
    model = AsyncModel()
    agent = agent_with(model)
    n = 20
    results, wall = run(timed(agent.agenerate(f"q{i}", thread_id=f"t{i}", resource_id="r") for i in range(n)))
    assert sorted(r.text for r in results) == sorted(f"re: q{i}" for i in range(n))
    assert wall < 4 * WAIT, f"{n} turns of {WAIT}s took {wall:.2f}s"
    assert not any(name.startswith("memproc-turn") for name in model.threads)  # awaited on the loop
    assert StoredMessage.objects.count() == 2 * n


def test_concurrent_turns_on_one_thread_keep_every_message():
    agent = agent_with(AsyncModel())
    n = 8
    run(timed(agent.agenerate(f"q{i}", thread_id="shared", resource_id="r") for i in range(n)))
    rows = list(
        StoredMessage.objects.filter(thread__public_id="shared")
        .order_by("sequence")
        .values_list("sequence", "role")
    )
    assert [seq for seq, _ in rows] == list(range(1, 2 * n + 1))
    assert [role for _, role in rows].count("assistant") == n


@pytest.mark.parametrize("model_class", [SleepyModel, AsyncModel], ids=["sync-model", "async-model"])
def test_concurrent_astream_overlaps_and_streams_deltas(model_class):
    model = model_class()
    agent = agent_with(model)

    async def one(i: int):
        first_delta = None
        start = time.perf_counter()
        events = []
        async for event in agent.astream(f"q{i}", thread_id=f"t{i}", resource_id="r"):
            if event.type == "text-delta" and first_delta is None:
                first_delta = time.perf_counter() - start
            events.append(event)
        return first_delta, events

    n = 6
    results, wall = run(timed(one(i) for i in range(n)))
    # Overlap shown by the model's own count of calls in flight, not by the clock of a busy machine;
    # the wall-clock bound only rules out running one after another.
    assert model.peak > 1
    assert wall < n * WAIT, f"{n} turns of {WAIT}s took {wall:.2f}s: they ran one after another"
    for first_delta, events in results:
        assert events[-1].type == "finish" and first_delta is not None
    assert StoredMessage.objects.count() == 2 * n


def test_cancelling_a_streamed_turn_saves_nothing_and_logs_at_info(caplog):
    agent = agent_with(AsyncModel(delta_gap=1.0))

    async def cancel_after_first_delta():
        seen = asyncio.Event()

        async def consume():
            async for event in agent.astream("hello", thread_id="t-cancel", resource_id="r"):
                if event.type == "text-delta":
                    seen.set()

        task = asyncio.create_task(consume())
        await asyncio.wait_for(seen.wait(), 5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    with caplog.at_level(logging.INFO, logger="memproc"):
        run(cancel_after_first_delta())
    assert StoredMessage.objects.count() == 0
    cancelled = [r for r in caplog.records if "cancelled" in r.getMessage()]
    assert cancelled and all(r.levelno == logging.INFO for r in cancelled)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_closing_the_stream_early_saves_nothing():
    agent = agent_with(AsyncModel())

    async def read_one_then_close():
        events = agent.astream("hello", thread_id="t-close", resource_id="r")
        async for event in events:
            if event.type == "text-delta":
                break
        await events.aclose()

    run(read_one_then_close())
    assert StoredMessage.objects.count() == 0


def test_async_turns_leave_no_open_connection_in_worker_threads():
    agent = agent_with(SleepyModel())
    run(timed(agent.agenerate(f"q{i}", thread_id=f"t{i}", resource_id="r") for i in range(4)))
    from memproc.turns.aio import executor

    def open_connections() -> int:
        return sum(1 for c in connections.all(initialized_only=True) if c.connection is not None)

    # Every worker thread reports whether it still holds a connection (CONN_MAX_AGE is 0 in tests).
    futures = [executor().submit(open_connections) for _ in range(8)]
    assert [f.result() for f in futures] == [0] * 8
