"""Issue 16, items 6 and 10, through the HTTP API: what a misbehaving or refusing model provider can
make memproc say to a caller.

DESIGN §5: a misbehaving model provider answers 502 — never a 500 — and no error body carries a
secret, a provider's own message or an internal URL. The agent's model is the real `OpenAIChatModel`
talking, through the real `openai` SDK, to a loopback server: the scriptable OpenAI-compatible one for
status errors, a raw `http.server` for bytes no OpenAI-compatible server should send.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.test import override_settings
from rest_framework.test import APIClient

from memproc import Agent, Memory, models
from memproc.agents import register, unregister
from memproc.llm.openai import OpenAIChatModel
from memproc.testing.openai_server import OpenAICompatibleServer
from tests.factories import ResourceFactory, UserFactory

pytest.importorskip("openai")
pytestmark = pytest.mark.django_db

API = "/api/memproc/"
KEY = "sk-proj-LEAKCANARY0123456789"
PROVIDER_TEXT = "upstream-internal-detail-7f3a"
AGENT = "provider-errors"

PUBLIC = {
    "model_authentication": "The model provider rejected the credentials.",
    "model_unavailable": "The model provider is unavailable.",
    "model_bad_response": "The model provider sent a reply memproc could not read.",
}


# --- a raw loopback server ------------------------------------------------------------------------


class RawServer:
    """Answers every POST with the scripted status, content type and bytes."""

    def __init__(self) -> None:
        self.status = 200
        self.content_type = "application/json"
        self.body = b"{}"
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    self.send_response(owner.status)
                    self.send_header("Content-Type", owner.content_type)
                    self.send_header("Content-Length", str(len(owner.body)))
                    self.end_headers()
                    self.wfile.write(owner.body)
                except OSError:
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    def answer(self, body: bytes | str, *, content_type: str = "application/json", status: int = 200) -> None:
        self.body = body.encode() if isinstance(body, str) else body
        self.content_type, self.status = content_type, status

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"


@pytest.fixture
def raw_server() -> Iterator[RawServer]:
    server = RawServer()
    server.thread.start()
    yield server
    server.httpd.shutdown()
    server.httpd.server_close()


# --- an agent over the real adapter, and a caller -------------------------------------------------


@pytest.fixture
def agent_for() -> Iterator[Callable[[str], Agent]]:
    registered: list[str] = []

    def build(base_url: str) -> Agent:
        model = OpenAIChatModel("test-model", base_url=base_url, api_key=KEY, max_retries=0, timeout=5)
        agent = Agent(id=AGENT, instructions="Be brief.", model=model, memory=Memory(last_messages=10))
        register(agent, replace=True)
        registered.append(agent.id)
        return agent

    yield build
    for agent_id in registered:
        unregister(agent_id)


@pytest.fixture
def caller() -> APIClient:
    user = UserFactory()
    ResourceFactory(id=str(user.pk))
    client = APIClient()
    client.force_authenticate(user)
    return client


def generate(client: APIClient, thread_id: str = "t1") -> Any:
    return client.post(
        f"{API}agents/{AGENT}/generate/", {"messages": "hi", "thread_id": thread_id}, format="json"
    )


def stream(client: APIClient, thread_id: str = "t1") -> Any:
    return client.post(
        f"{API}agents/{AGENT}/stream/",
        {"messages": "hi", "thread_id": thread_id},
        format="json",
        HTTP_ACCEPT="text/event-stream",
    )


def assert_safe(raw: bytes | str, *urls: str) -> None:
    """Nothing of the provider's own, no key, no internal URL."""
    text = raw.decode() if isinstance(raw, bytes) else raw
    for leak in (KEY, PROVIDER_TEXT, "127.0.0.1", "Incorrect API key", *urls):
        assert leak not in text, f"{leak!r} leaked into {text!r}"


def assert_502(response: Any, code: str, *urls: str) -> None:
    assert response.status_code == 502, response.content
    assert response["Content-Type"].startswith("application/json")
    assert response.json() == {"detail": PUBLIC[code], "code": code}
    assert_safe(response.content, *urls)


def completion(choices: Any) -> str:
    return json.dumps(
        {"id": "c", "object": "chat.completion", "created": 1, "model": "m", "choices": choices}
    )


# --- item 10: malformed replies are 502s ------------------------------------------------------------

MALFORMED = {
    "html": (f"<html><body><h1>502</h1>{PROVIDER_TEXT}</body></html>", "text/html"),
    "not json": ('{"choices": [' + PROVIDER_TEXT, "application/json"),
    "message null": (
        completion([{"index": 0, "message": None, "finish_reason": "stop"}]),
        "application/json",
    ),
    "content a number": (
        completion([{"index": 0, "message": {"role": "assistant", "content": 5}, "finish_reason": "stop"}]),
        "application/json",
    ),
    "choices missing": (json.dumps({"id": "c", "detail": PROVIDER_TEXT}), "application/json"),
    "json list": ("[1, 2]", "application/json"),
}


@pytest.mark.parametrize("kind", sorted(MALFORMED))
def test_generate_answers_502_to_a_malformed_reply_and_saves_nothing(kind, raw_server, agent_for, caller):
    agent_for(raw_server.base_url)
    body, content_type = MALFORMED[kind]
    raw_server.answer(body, content_type=content_type)
    assert_502(generate(caller), "model_bad_response", raw_server.base_url)
    assert not models.Message.objects.exists()


@pytest.mark.parametrize("kind", sorted(MALFORMED))
def test_stream_answers_502_to_a_malformed_reply(kind, raw_server, agent_for, caller):
    agent_for(raw_server.base_url)
    body, content_type = MALFORMED[kind]
    raw_server.answer(body, content_type=content_type)
    assert_502(stream(caller), "model_bad_response", raw_server.base_url)
    assert not models.Message.objects.exists()


def test_a_stream_that_turns_malformed_midway_ends_with_a_safe_error_event(raw_server, agent_for, caller):
    agent_for(raw_server.base_url)
    chunk = {
        "id": "c",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": {"content": "Half an answer"}, "finish_reason": None}],
    }
    frames = [json.dumps(chunk), '{"choices": [' + PROVIDER_TEXT]
    raw_server.answer("".join(f"data: {f}\n\n" for f in frames), content_type="text/event-stream")

    response = stream(caller)
    raw = b"".join(response.streaming_content)

    assert response.status_code == 200
    assert b"event: text-delta" in raw
    assert b'event: error\ndata: {"detail":"' + PUBLIC["model_bad_response"].encode() in raw
    assert_safe(raw, raw_server.base_url)
    assert not models.Message.objects.exists()


# --- item 6: a provider's words and URLs stay in the log ------------------------------------------


@pytest.fixture
def provider() -> Iterator[OpenAICompatibleServer]:
    with OpenAICompatibleServer() as server:
        yield server


def test_a_401_echoing_the_key_answers_502_in_memprocs_words(provider, agent_for, caller, caplog):
    agent_for(provider.base_url)
    provider.enqueue({"status": 401, "message": f"Incorrect API key provided: {KEY}. {PROVIDER_TEXT}"})
    with caplog.at_level(logging.WARNING):
        response = generate(caller)
    assert_502(response, "model_authentication", provider.base_url)
    # The operator's log has what the provider said, its status and the URL; the key is masked there too.
    assert "401" in caplog.text and provider.base_url in caplog.text and PROVIDER_TEXT in caplog.text
    assert KEY not in caplog.text


def test_a_401_while_streaming_answers_502_in_memprocs_words(provider, agent_for, caller):
    agent_for(provider.base_url)
    provider.enqueue({"status": 401, "message": f"Incorrect API key provided: {KEY}"})
    assert_502(stream(caller), "model_authentication", provider.base_url)


@pytest.mark.parametrize("status", [500, 502, 503])
def test_a_provider_5xx_page_answers_502_unavailable(status, raw_server, agent_for, caller):
    agent_for(raw_server.base_url)
    raw_server.answer(
        f"<html>{PROVIDER_TEXT} at {raw_server.base_url}</html>", content_type="text/html", status=status
    )
    assert_502(generate(caller), "model_unavailable", raw_server.base_url)


def test_an_unreachable_provider_answers_502_without_its_url(agent_for, caller):
    with OpenAICompatibleServer() as stopped:
        base_url = stopped.base_url
    agent_for(base_url)
    assert_502(generate(caller), "model_unavailable", base_url)
    assert_502(stream(caller, thread_id="t2"), "model_unavailable", base_url)


def test_the_debug_error_page_does_not_show_the_api_key(provider, agent_for, caller, monkeypatch):
    """A bug (any unexpected exception) inside the adapter, with DEBUG on: Django's technical 500 page
    lists every frame's local variables, the adapter's options among them."""
    agent_for(provider.base_url)

    def broken(self: OpenAIChatModel, completion: Any) -> Any:
        raise RuntimeError("a bug while reading the reply")

    monkeypatch.setattr(OpenAIChatModel, "_response", broken)
    caller.raise_request_exception = False
    with override_settings(DEBUG=True):
        response = generate(caller)

    assert response.status_code == 500
    page = response.content.decode()
    assert "a bug while reading the reply" in page and "options" in page  # the frames are there
    assert KEY not in page


# --- the same under ASGI: the turn awaits the adapter's agenerate / astream -------------------------


def run_async(fn: Callable[[], Any]) -> Any:
    from asgiref.sync import async_to_sync
    from django.db import connections

    try:
        return async_to_sync(fn)()
    finally:
        connections.close_all()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("endpoint", ["generate", "stream"])
@pytest.mark.parametrize("kind", ["html", "message null"])
def test_under_asgi_a_malformed_reply_is_a_502(endpoint, kind, raw_server, agent_for):
    """Under ASGI a stream is not primed (its turn goes on on the event loop once the response has
    started), so a provider that fails before the first delta ends a 200 stream with one `error`
    event instead of a JSON 502; either way the caller reads memproc's words only."""
    from django.test import AsyncClient

    agent_for(raw_server.base_url)
    body, content_type = MALFORMED[kind]
    raw_server.answer(body, content_type=content_type)
    user = UserFactory()
    ResourceFactory(id=str(user.pk))
    client = AsyncClient()
    client.force_login(user)

    async def call() -> tuple[Any, bytes]:
        response = await client.post(
            f"{API}agents/{AGENT}/{endpoint}/",
            {"messages": "hi", "thread_id": "t1"},
            content_type="application/json",
        )
        if response.streaming:
            return response, b"".join([chunk async for chunk in response.streaming_content])
        return response, response.content

    response, raw = run_async(call)
    if endpoint == "stream" and response.status_code == 200:
        error = {"detail": PUBLIC["model_bad_response"], "code": "model_bad_response"}
        assert raw == b"event: error\ndata: " + json.dumps(error, separators=(",", ":")).encode() + b"\n\n"
        assert_safe(raw, raw_server.base_url)
    else:
        assert_502(response, "model_bad_response", raw_server.base_url)
    assert not models.Message.objects.exists()
