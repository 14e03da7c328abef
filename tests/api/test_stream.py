"""`agents/<id>/stream/`: Server-Sent Events, read incrementally over a real HTTP connection."""

from __future__ import annotations

import base64
import http.client
import json
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from memproc import models
from memproc.events import StreamEvent
from memproc.exceptions import ModelUnavailableError
from memproc.llm.types import ModelRequest, ModelResponse, ToolCall
from memproc.tools import tool
from tests.api.conftest import API, BlockStreamWord, BlockWord

STREAM = API + "agents/api-test/stream/"


class GatedModel:
    """Streams "Hello", then waits for the test to open the gate before the rest: proof that the first
    event reached the client while the turn was still running."""

    id = "test/gated"

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.waiting = False

    def generate(self, request: ModelRequest) -> ModelResponse:
        return ModelResponse(text="Hello world")

    def stream(self, request: ModelRequest) -> Iterator[StreamEvent]:
        self.waiting = True  # until the gate opens (or times out)
        yield StreamEvent(type="text-delta", text="Hello")
        opened = self.gate.wait(5)
        self.waiting = False
        if not opened:
            raise ModelUnavailableError("the test never read the first event")
        yield StreamEvent(type="text-delta", text=" world")
        yield StreamEvent(type="finish", usage={"completion_tokens": 2}, finish_reason="stop")


class FailingMidStream:
    id = "test/failing"

    def generate(self, request: ModelRequest) -> ModelResponse:
        raise AssertionError("streams only")

    def stream(self, request: ModelRequest) -> Iterator[StreamEvent]:
        yield StreamEvent(type="text-delta", text="Half an ans")
        raise ModelUnavailableError("connection reset")


def parse_sse(raw: bytes) -> list[tuple[str, Any]]:
    events = []
    for block in raw.decode().split("\n\n"):
        if not block.strip():
            continue
        fields = dict(line.split(": ", 1) for line in block.splitlines())
        events.append((fields["event"], json.loads(fields["data"])))
    return events


def stream_with_client(client, **body) -> Any:
    return client.post(STREAM, body, format="json", HTTP_ACCEPT="text/event-stream")


# --- through Django's test client -----------------------------------------------------------------


@pytest.mark.django_db
def test_stream_sends_deltas_then_the_result(owner_client, agent, model, resource):
    model.add("Hi there Ada")
    response = stream_with_client(owner_client, messages="hello", thread_id="t-stream")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/event-stream")
    assert response["Cache-Control"] == "no-cache"
    assert response["X-Accel-Buffering"] == "no"
    events = parse_sse(b"".join(response.streaming_content))
    assert [e for e, _ in events] == ["text-delta", "text-delta", "text-delta", "finish"]
    assert "".join(d["text"] for e, d in events if e == "text-delta") == "Hi there Ada"
    result = events[-1][1]
    assert set(result) == {
        "text",
        "messages",
        "tripwire",
        "thread_id",
        "resource_id",
        "usage",
        "memory",
        "pending",
    }
    assert (result["text"], result["thread_id"], result["tripwire"]) == ("Hi there Ada", "t-stream", None)
    assert models.Message.objects.filter(thread__public_id="t-stream").count() == 2


@pytest.mark.django_db
def test_stream_shows_tool_calls_and_results(owner_client, make_agent, model, resource):
    @tool
    def add(a: int, b: int) -> int:
        """Adds two numbers."""
        return a + b

    make_agent(tools=[add])
    model.add(ModelResponse(tool_calls=[ToolCall(id="c1", name="add", args={"a": 2, "b": 3})]), "It is 5")
    events = parse_sse(b"".join(stream_with_client(owner_client, messages="2+3?").streaming_content))
    kinds = [e for e, _ in events]
    assert kinds[:2] == ["tool-call", "tool-result"] and kinds[-1] == "finish"
    assert events[0][1] == {"id": "c1", "name": "add", "args": {"a": 2, "b": 3}}
    assert events[1][1] == {
        "type": "tool-result",
        "tool_call_id": "c1",
        "tool_name": "add",
        "result": 5,
        "is_error": False,
    }


@pytest.mark.django_db
def test_an_input_tripwire_is_one_event_that_ends_the_stream(owner_client, agent, model, resource):
    events = parse_sse(b"".join(stream_with_client(owner_client, messages="forbidden!").streaming_content))
    assert [e for e, _ in events] == ["tripwire"]
    assert events[0][1]["tripwire"]["processor_id"] == "block-word"
    assert model.calls == 0 and not models.Message.objects.exists()


@pytest.mark.django_db
def test_an_error_mid_stream_is_an_error_event_and_saves_nothing(owner_client, make_agent, resource):
    make_agent(model=FailingMidStream())
    events = parse_sse(
        b"".join(stream_with_client(owner_client, messages="hi", thread_id="t").streaming_content)
    )
    assert events == [
        ("text-delta", {"text": "Half an ans"}),
        ("error", {"detail": "The model provider is unavailable.", "code": "model_unavailable"}),
    ]
    assert not models.Message.objects.exists()
    assert not models.Thread.objects.filter(public_id="t").exists()


@pytest.mark.django_db
def test_a_model_that_fails_before_any_event_is_a_json_502(owner_client, agent, model, resource):
    model.add(ModelUnavailableError("no route to host"))
    response = stream_with_client(owner_client, messages="hi", thread_id="t")
    assert response.status_code == 502
    assert response.json() == {
        "detail": "The model provider is unavailable.",
        "code": "model_unavailable",
    }
    assert not models.Thread.objects.filter(public_id="t").exists()


@pytest.mark.django_db
def test_bad_input_is_a_json_400_before_any_event(owner_client, agent, resource):
    response = stream_with_client(owner_client, messages=[])
    assert response.status_code == 400
    assert response["Content-Type"] == "application/json"
    assert set(response.json()) == {"messages"}


@pytest.mark.django_db
def test_another_users_thread_is_a_json_404(owner_client, agent, model, other_thread):
    response = stream_with_client(
        owner_client, messages="hi", thread_id=other_thread.public_id, resource_id=other_thread.resource_id
    )
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"
    assert model.calls == 0


@pytest.mark.django_db
def test_unknown_agent_and_anonymous_caller(api_client, owner_client, resource):
    assert (
        owner_client.post(API + "agents/nobody/stream/", {"messages": "hi"}, format="json").status_code == 404
    )
    assert api_client.post(STREAM, {"messages": "hi"}, format="json").status_code in (401, 403)


# --- over a real HTTP connection ------------------------------------------------------------------


def open_stream(live_server, user, body: dict[str, Any]) -> tuple[http.client.HTTPConnection, Any]:
    url = urlsplit(live_server.url)
    connection = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
    token = base64.b64encode(f"{user.get_username()}:pw".encode()).decode()
    connection.request(
        "POST",
        STREAM,
        body=json.dumps(body),
        headers={
            "Content-Type": "application/json",
            "Accept": "text/event-stream",
            "Authorization": f"Basic {token}",
        },
    )
    return connection, connection.getresponse()


def read_event(response: Any) -> tuple[str, Any] | None:
    """Reads one SSE frame line by line, as a browser's EventSource does."""
    fields: dict[str, str] = {}
    while True:
        line = response.readline()
        if not line:
            return None
        line = line.decode().rstrip("\n")
        if not line:
            return fields["event"], json.loads(fields["data"])
        name, _, value = line.partition(": ")
        fields[name] = value


@pytest.mark.django_db(transaction=True)
def test_events_arrive_while_the_turn_is_still_running(live_server, make_agent, user):
    gated = GatedModel()
    make_agent(model=gated, input_processors=[BlockWord()], output_processors=[BlockStreamWord()])
    connection, response = open_stream(live_server, user, {"messages": "hello", "thread_id": "live"})
    try:
        assert response.status == 200
        assert response.getheader("Content-Type").startswith("text/event-stream")
        assert response.getheader("X-Accel-Buffering") == "no"
        first = read_event(response)
        assert first == ("text-delta", {"text": "Hello"})
        assert gated.waiting  # the model is still mid-answer: the event was not buffered
        assert not models.Message.objects.filter(thread__public_id="live").exists()  # nothing saved mid-turn
        gated.gate.set()
        assert read_event(response) == ("text-delta", {"text": " world"})
        event, result = read_event(response)
        assert event == "finish"
        assert (result["text"], result["thread_id"]) == ("Hello world", "live")
        assert read_event(response) is None  # the stream ended
    finally:
        gated.gate.set()
        connection.close()
    assert models.Message.objects.filter(thread__public_id="live").count() == 2


@pytest.mark.django_db(transaction=True)
def test_a_stream_tripwire_over_http_ends_the_stream_and_saves_nothing(live_server, agent, model, user):
    model.add("the secret is 42")
    connection, response = open_stream(live_server, user, {"messages": "tell me", "thread_id": "live-trip"})
    try:
        events = []
        while (event := read_event(response)) is not None:
            events.append(event)
    finally:
        connection.close()
    assert [e for e, _ in events] == ["text-delta", "tripwire"]
    assert events[0][1] == {"text": "the"}
    tripwire = events[1][1]["tripwire"]
    assert (tripwire["processor_id"], tripwire["phase"]) == ("block-stream-word", "stream")
    assert events[1][1]["text"] == ""
    assert not models.Message.objects.exists()
    log = models.TripwireLog.objects.get()
    assert (log.thread_id, log.phase) == ("live-trip", "stream")


@pytest.mark.django_db
def test_a_retry_is_an_event_before_the_new_attempt(owner_client, make_agent, model, resource):
    class RejectDraft:
        id = "reject-draft"

        def process_output_step(self, ctx):
            if "draft" in ctx.messages[-1].text:
                ctx.abort("No drafts", retry=True)

    make_agent(output_processors=[RejectDraft()], max_processor_retries=1)
    model.add("a draft", "the answer")
    events = parse_sse(b"".join(stream_with_client(owner_client, messages="hi").streaming_content))
    kinds = [e for e, _ in events]
    assert "retry" in kinds and kinds[-1] == "finish"
    retry_at = kinds.index("retry")
    assert events[retry_at][1]["tripwire"]["reason"] == "No drafts"
    after = "".join(data["text"] for kind, data in events[retry_at:] if kind == "text-delta")
    assert after == "the answer" and events[-1][1]["text"] == "the answer"
