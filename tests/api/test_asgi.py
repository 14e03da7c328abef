"""Under ASGI the turn endpoints do not block: `stream/` is an async streaming response whose frames
leave as the model makes them, `generate/` answers as under WSGI, and a client that goes away
cancels the turn (nothing saved)."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import AsyncIterator

import pytest
from asgiref.sync import ThreadSensitiveContext, async_to_sync
from django.db import connections
from django.test import AsyncClient

from memproc import models
from memproc.events import StreamEvent
from memproc.llm.types import ModelRequest, ModelResponse
from tests.api.conftest import API, stream_and_leave

pytestmark = pytest.mark.django_db(transaction=True)

STREAM = API + "agents/api-test/stream/"
GENERATE = API + "agents/api-test/generate/"
GAP = 0.3


class SlowStreamingModel:
    """Three deltas GAP seconds apart, awaited on the event loop."""

    id = "test/slow-stream"

    def generate(self, request: ModelRequest) -> ModelResponse:
        return ModelResponse(text="one two three")

    async def agenerate(self, request: ModelRequest) -> ModelResponse:
        await asyncio.sleep(GAP)
        return ModelResponse(text="one two three")

    async def astream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        for word in ("one ", "two ", "three"):
            await asyncio.sleep(GAP)
            yield StreamEvent(type="text-delta", text=word)
        yield StreamEvent(type="finish", usage={}, finish_reason="stop")


def run(fn):
    try:
        return async_to_sync(fn)()
    finally:
        connections.close_all()


def async_client(user) -> AsyncClient:
    client = AsyncClient()
    client.force_login(user)
    return client


def parse(chunks: list[bytes]) -> list[tuple[str, dict]]:
    events = []
    for block in b"".join(chunks).decode().split("\n\n"):
        if block.strip():
            fields = dict(line.split(": ", 1) for line in block.splitlines())
            events.append((fields["event"], json.loads(fields["data"])))
    return events


def test_stream_is_async_and_frames_arrive_spread_over_time(user, make_agent, resource):
    make_agent(model=SlowStreamingModel())
    client = async_client(user)

    async def read():
        response = await client.post(STREAM, {"messages": "hi"}, content_type="application/json")
        assert response.status_code == 200 and response.is_async
        start = time.perf_counter()
        arrivals = []
        chunks = []
        async for chunk in response.streaming_content:
            arrivals.append(time.perf_counter() - start)
            chunks.append(chunk)
        return arrivals, chunks

    arrivals, chunks = run(read)
    events = parse(chunks)
    assert [kind for kind, _ in events] == ["text-delta", "text-delta", "text-delta", "finish"]
    deltas = arrivals[:3]
    assert deltas[2] - deltas[0] > GAP, f"frames arrived together at {arrivals}"
    assert models.Message.objects.count() == 2


def test_generate_under_asgi_answers_and_saves(user, make_agent, resource):
    make_agent(model=SlowStreamingModel())
    client = async_client(user)

    async def post():
        return await client.post(GENERATE, {"messages": "hi"}, content_type="application/json")

    response = run(post)
    assert response.status_code == 200, response.content
    assert response.json()["text"] == "one two three"
    assert models.Message.objects.count() == 2


def test_bad_input_under_asgi_is_still_a_json_400(user, make_agent, resource):
    make_agent(model=SlowStreamingModel())
    client = async_client(user)

    async def post():
        return await client.post(STREAM, {"messages": []}, content_type="application/json")

    response = run(post)
    assert response.status_code == 400 and "messages" in response.json()


def test_client_that_goes_away_cancels_the_turn_and_saves_nothing(user, make_agent, resource, caplog):
    """Through Django's own ASGI handler: the client disconnects after the first frame."""
    make_agent(model=SlowStreamingModel())
    with caplog.at_level(logging.INFO, logger="memproc"):
        sent = stream_and_leave(user, STREAM, {"messages": "hi"})
    assert sent[0]["status"] == 200
    frames = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    assert b"event: text-delta" in frames and b"event: finish" not in frames
    assert models.Message.objects.count() == 0
    assert any("cancelled" in r.getMessage() and r.levelno == logging.INFO for r in caplog.records)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_stream_read_to_its_end_logs_no_cancellation(user, make_agent, resource, caplog):
    """Every completed ASGI stream used to log "cancelled (the caller went away); nothing saved"."""
    make_agent(model=SlowStreamingModel())
    client = async_client(user)

    async def read():
        response = await client.post(STREAM, {"messages": "hi"}, content_type="application/json")
        return [chunk async for chunk in response.streaming_content]

    with caplog.at_level(logging.INFO, logger="memproc"):
        events = parse(run(read))
    assert events[-1][0] == "finish" and models.Message.objects.count() == 2
    assert "cancelled" not in caplog.text and "nothing saved" not in caplog.text


def test_requests_that_use_the_database_at_once_are_bounded_under_asgi(
    user, make_agent, resource, monkeypatch, settings
):
    """Each ASGI request's sync code runs in a thread of its own with its own connection: memproc
    admits ASYNC_THREADS of them at once to the part that uses the database, and a turn leaves before
    its model wait, so many turns in flight hold few connections and none is refused."""
    from memproc import admission

    settings.MEMPROC = {**settings.MEMPROC, "ASYNC_THREADS": 2}
    monkeypatch.setattr(admission, "_permits", None)
    inside, peak = [0], [0]
    holding = threading.local()  # whether this thread holds its permit: taken once, given back once
    real_acquire, real_release = admission.admission_acquire, admission.admission_release

    def acquire() -> None:
        real_acquire()
        if not getattr(holding, "permit", False):
            holding.permit = True
            inside[0] += 1
            peak[0] = max(peak[0], inside[0])

    def release() -> None:
        if getattr(holding, "permit", False):
            holding.permit = False
            inside[0] -= 1
        real_release()

    monkeypatch.setattr("memproc.api.views.base.admission_acquire", acquire)
    monkeypatch.setattr("memproc.api.views.base.admission_release", release)
    monkeypatch.setattr("memproc.turns.asgi.admission_release", release)
    from memproc.api.views import base

    real_thread_get = base.thread_get

    def slow_thread_get(**kwargs):
        time.sleep(0.1)  # a slow read before the model: requests would pile up in it
        return real_thread_get(**kwargs)

    monkeypatch.setattr(base, "thread_get", slow_thread_get)
    make_agent(model=SlowStreamingModel())
    client = async_client(user)

    async def many():
        async def one(i: int) -> int:
            # A thread of its own for the request's sync code, as Django's ASGIHandler gives each one.
            async with ThreadSensitiveContext():
                response = await client.post(
                    STREAM, {"messages": f"hi {i}", "thread_id": f"t{i}"}, content_type="application/json"
                )
                async for _ in response.streaming_content:
                    pass
                return response.status_code

        started = time.perf_counter()
        statuses = await asyncio.gather(*(one(i) for i in range(8)))
        return statuses, time.perf_counter() - started

    statuses, elapsed = run(many)
    assert statuses == [200] * 8
    assert 1 <= peak[0] <= 2 and inside[0] == 0  # taken by every request, and given back
    assert elapsed < 8 * 3 * GAP  # the turns still overlap: only their database part waits
    assert models.Message.objects.filter(thread__public_id__startswith="t").count() == 16


def permits_free(count: int) -> bool:
    """Whether `count` threads can hold a permit at once now (each gives it back after)."""
    from memproc import admission

    together = threading.Barrier(count, timeout=1)
    met: list[bool] = []

    def hold() -> None:
        admission.admission_acquire()
        try:
            together.wait()
            met.append(True)
        except threading.BrokenBarrierError:
            pass
        finally:
            admission.admission_release()

    threads = [threading.Thread(target=hold, daemon=True) for _ in range(count)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 10
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return len(met) == count


def test_admission_bounds_the_threads_that_hold_a_permit(monkeypatch, settings):
    from memproc import admission

    settings.MEMPROC = {**settings.MEMPROC, "ASYNC_THREADS": 3}
    monkeypatch.setattr(admission, "_permits", None)
    inside, peak, lock = [0], [0], threading.Lock()
    errors: list[BaseException] = []

    def request() -> None:
        try:
            admission.admission_acquire()
            admission.admission_acquire()  # a second take by the same thread holds one permit
            with lock:
                inside[0] += 1
                peak[0] = max(peak[0], inside[0])
            time.sleep(0.05)
            with lock:
                inside[0] -= 1
            admission.admission_release()
            admission.admission_release()  # nothing held: nothing given back twice
        except BaseException as exc:  # noqa: BLE001 - asserted below
            errors.append(exc)

    for _ in range(2):  # the second round finds every permit of the first given back
        peak[0] = 0
        threads = [threading.Thread(target=request, daemon=True) for _ in range(12)]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 10
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        assert not errors and peak[0] == 3
    assert permits_free(3) and not permits_free(4)


def test_a_request_that_fails_unanswered_gives_its_permit_back(
    user, make_agent, resource, monkeypatch, settings
):
    """An exception no handler answers (a 500) must not keep the request's permit: a few of those
    would otherwise leave every later request of the process waiting forever."""
    from memproc import admission

    settings.MEMPROC = {**settings.MEMPROC, "ASYNC_THREADS": 1}
    monkeypatch.setattr(admission, "_permits", None)

    def explode(**kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr("memproc.api.views.base.thread_get", explode)
    make_agent(model=SlowStreamingModel())
    client = async_client(user)
    client.raise_request_exception = False

    async def twice():
        statuses = []
        for _ in range(2):
            async with ThreadSensitiveContext():
                response = await asyncio.wait_for(
                    client.post(
                        GENERATE, {"messages": "hi", "thread_id": "t1"}, content_type="application/json"
                    ),
                    timeout=5,
                )
                statuses.append(response.status_code)
        return statuses

    assert run(twice) == [500, 500]  # the second one got the only permit back, and did not hang
    assert permits_free(1)


def test_a_database_that_refuses_connections_is_a_json_503(owner_client, agent, model, resource, monkeypatch):
    from django.db import OperationalError

    def refuse(**kwargs):
        raise OperationalError("connection failed: FATAL:  sorry, too many clients already")

    monkeypatch.setattr("memproc.api.views.base.thread_get", refuse)
    response = owner_client.post(GENERATE, {"messages": "hi", "thread_id": "t1"}, format="json")
    assert response.status_code == 503 and response["Content-Type"] == "application/json"
    assert response.json() == {
        "detail": "The database is unavailable; try again in a moment.",
        "code": "database_unavailable",
    }
    assert response["Retry-After"] == "1" and "too many clients" not in response.content.decode()
