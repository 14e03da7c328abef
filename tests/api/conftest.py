"""Fixtures for the API tests: users (owner, other, staff), clients, a registered scripted agent."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.core.cache import cache
from django.db import connections
from rest_framework.test import APIClient

from memproc import Agent, Memory
from memproc.agents import register, unregister
from memproc.processors.base import ProcessorContext
from memproc.testing import ScriptedModel
from tests.factories import ResourceFactory, ThreadFactory, UserFactory

API = "/api/memproc/"


class BlockWord:
    """Blocks input that contains `word` (an input tripwire)."""

    id = "block-word"

    def __init__(self, word: str = "forbidden") -> None:
        self.word = word

    def process_input(self, ctx: ProcessorContext) -> None:
        if self.word in ctx.messages[-1].text:
            ctx.abort(f"The word {self.word!r} is not allowed", metadata={"word": self.word})
        return None


class BlockStreamWord:
    """Blocks a streamed answer as soon as a delta contains `word` (a stream tripwire)."""

    id = "block-stream-word"

    def __init__(self, word: str = "secret") -> None:
        self.word = word

    def process_output_stream(self, ctx: ProcessorContext, part: Any) -> Any:
        if part.type == "text-delta" and self.word in part.text:
            ctx.abort("The answer leaked a secret", metadata={"word": self.word})
        return part


@pytest.fixture(autouse=True)
def _fresh_throttle_counts() -> Iterator[None]:
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def api_client() -> APIClient:
    return APIClient()


@pytest.fixture
def user(db: None) -> Any:
    return UserFactory()


@pytest.fixture
def other_user(db: None) -> Any:
    return UserFactory()


@pytest.fixture
def staff(db: None) -> Any:
    return UserFactory(is_staff=True)


def client_for(user: Any) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.fixture
def owner_client(user: Any) -> APIClient:
    return client_for(user)


@pytest.fixture
def other_client(other_user: Any) -> APIClient:
    return client_for(other_user)


@pytest.fixture
def staff_client(staff: Any) -> APIClient:
    return client_for(staff)


@pytest.fixture
def resource(user: Any) -> Any:
    """The owner's resource: the default resolver names it by the user's pk."""
    return ResourceFactory(id=str(user.pk))


@pytest.fixture
def other_resource(other_user: Any) -> Any:
    return ResourceFactory(id=str(other_user.pk))


@pytest.fixture
def thread(resource: Any) -> Any:
    return ThreadFactory(id="owned-thread", resource=resource, title="Mine")


@pytest.fixture
def other_thread(other_resource: Any) -> Any:
    return ThreadFactory(id="foreign-thread", resource=other_resource, title="Not yours")


@pytest.fixture
def model() -> ScriptedModel:
    return ScriptedModel()


@pytest.fixture
def make_agent(model: ScriptedModel) -> Iterator[Callable[..., Agent]]:
    """Builds and registers agents (unregistered after the test)."""
    registered: list[str] = []

    def build(**kwargs: Any) -> Agent:
        kwargs.setdefault("id", "api-test")
        kwargs.setdefault("instructions", "You are a test agent.")
        kwargs.setdefault("model", model)
        kwargs.setdefault("memory", Memory(last_messages=10))
        agent = Agent(**kwargs)
        register(agent, replace=True)
        registered.append(agent.id)
        return agent

    yield build
    for agent_id in registered:
        unregister(agent_id)


@pytest.fixture
def agent(make_agent: Callable[..., Agent]) -> Agent:
    return make_agent(input_processors=[BlockWord()], output_processors=[BlockStreamWord()])


def stream_and_leave(
    user: Any,
    path: str,
    payload: Any,
    headers: tuple[tuple[bytes, bytes], ...] = (),
    *,
    leave_when: threading.Event | None = None,
) -> list:
    """POSTs `payload` to a stream endpoint through Django's own ASGI handler, as `user` with Basic
    auth, and disconnects after the first frame of the body (or, with `leave_when`, once that event
    is set, from whatever thread); returns the ASGI messages sent back."""
    from django.core.asgi import get_asgi_application

    user.set_password("pw")
    user.save()
    credentials = base64.b64encode(f"{user.get_username()}:pw".encode())
    body = json.dumps(payload).encode()
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"testserver"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"authorization", b"Basic " + credentials),
            *headers,
        ],
        "client": ("127.0.0.1", 5000),
        "server": ("testserver", 80),
    }

    async def converse() -> list[dict[str, Any]]:
        first_body = asyncio.Event()
        sent: list[dict[str, Any]] = []
        requested = False

        async def receive() -> dict[str, Any]:
            nonlocal requested
            if not requested:
                requested = True
                return {"type": "http.request", "body": body, "more_body": False}
            if leave_when is not None:
                await asyncio.to_thread(leave_when.wait, 10)
            else:
                await first_body.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)
            if message["type"] == "http.response.body" and message.get("body"):
                first_body.set()

        await asyncio.wait_for(get_asgi_application()(scope, receive, send), 10)
        return sent

    try:
        return async_to_sync(converse)()
    finally:
        connections.close_all()
