"""Under ASGI the turn endpoints do not block: `stream/` is an async streaming response whose frames
leave as the model makes them, `generate/` answers as under WSGI, and a client that goes away
cancels the turn (nothing saved)."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import time
from collections.abc import AsyncIterator

import pytest
from asgiref.sync import async_to_sync
from django.db import connections
from django.test import AsyncClient

from memproc import models
from memproc.events import StreamEvent
from memproc.llm.types import ModelRequest, ModelResponse
from tests.api.conftest import API

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
    from django.core.asgi import get_asgi_application

    make_agent(model=SlowStreamingModel())
    user.set_password("pw")
    user.save()
    credentials = base64.b64encode(f"{user.get_username()}:pw".encode())
    body = json.dumps({"messages": "hi"}).encode()
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": STREAM,
        "raw_path": STREAM.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"testserver"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"authorization", b"Basic " + credentials),
        ],
        "client": ("127.0.0.1", 5000),
        "server": ("testserver", 80),
    }

    async def converse():
        first_body = asyncio.Event()
        sent: list[dict] = []
        requested = False

        async def receive():
            nonlocal requested
            if not requested:
                requested = True
                return {"type": "http.request", "body": body, "more_body": False}
            await first_body.wait()
            return {"type": "http.disconnect"}

        async def send(message):
            sent.append(message)
            if message["type"] == "http.response.body" and message.get("body"):
                first_body.set()

        await asyncio.wait_for(get_asgi_application()(scope, receive, send), 10)
        return sent

    with caplog.at_level(logging.INFO, logger="memproc"):
        sent = run(converse)
    assert sent[0]["status"] == 200
    frames = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    assert b"event: text-delta" in frames and b"event: finish" not in frames
    assert models.Message.objects.count() == 0
    assert any("cancelled" in r.getMessage() and r.levelno == logging.INFO for r in caplog.records)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
