"""Issue 16, item 10: a provider that answers something malformed is a `ModelResponseError` (the API's
502), never a crash (a 500) — for `generate`, `stream`, `agenerate` and `astream`, through the real
`openai` SDK against a raw loopback `http.server` that answers exactly the bytes scripted here."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from memproc.exceptions import ModelError, ModelResponseError
from memproc.llm import ModelRequest
from memproc.llm.openai import OpenAIChatModel
from memproc.messages import Message

pytest.importorskip("openai")

SECRET = "sk-live-0123456789abcdef"
PROVIDER_TEXT = "upstream-internal-detail"


def completion(choices: Any, **extra: Any) -> bytes:
    body = {"id": "c1", "object": "chat.completion", "created": 1, "model": "m", "choices": choices, **extra}
    return json.dumps(body).encode()


def message(**fields: Any) -> list[dict[str, Any]]:
    return [{"index": 0, "message": {"role": "assistant", **fields}, "finish_reason": "stop"}]


JSON = "application/json"
# What a broken proxy, a misconfigured base_url or a buggy local server answers to a chat request.
MALFORMED: dict[str, tuple[str, bytes]] = {
    "html page": ("text/html", f"<html><body>Bad gateway {PROVIDER_TEXT}</body></html>".encode()),
    "plain text": ("text/plain", PROVIDER_TEXT.encode()),
    "not json": (JSON, b'{"choices": [' + PROVIDER_TEXT.encode()),
    "empty body": (JSON, b""),
    "json null": (JSON, b"null"),
    "json list": (JSON, b"[1, 2, 3]"),
    "json string": (JSON, json.dumps(PROVIDER_TEXT).encode()),
    "no choices": (JSON, json.dumps({"id": "c1", "object": "chat.completion"}).encode()),
    "choices null": (JSON, completion(None)),
    "choices empty": (JSON, completion([])),
    "choices a string": (JSON, completion(PROVIDER_TEXT)),
    "choice a number": (JSON, completion([5])),
    "message null": (JSON, completion([{"index": 0, "message": None, "finish_reason": "stop"}])),
    "message missing": (JSON, completion([{"index": 0, "finish_reason": "stop"}])),
    "message a string": (JSON, completion([{"index": 0, "message": PROVIDER_TEXT, "finish_reason": "stop"}])),
    "content a number": (JSON, completion(message(content=5))),
    "content an object": (JSON, completion(message(content={"text": "hi"}))),
    "refusal a list": (JSON, completion(message(content=None, refusal=["no"]))),
    "tool_calls a string": (JSON, completion(message(content=None, tool_calls=PROVIDER_TEXT))),
    "tool call a number": (JSON, completion(message(content=None, tool_calls=[7]))),
    "tool call name a number": (
        JSON,
        completion(
            message(content=None, tool_calls=[{"id": "c", "function": {"name": 5, "arguments": "{}"}}])
        ),
    ),
    "tool call arguments a number": (
        JSON,
        completion(
            message(content=None, tool_calls=[{"id": "c", "function": {"name": "f", "arguments": 5}}])
        ),
    ),
    "tool call id a number": (
        JSON,
        completion(
            message(content=None, tool_calls=[{"id": 5, "function": {"name": "f", "arguments": "{}"}}])
        ),
    ),
    "finish_reason a number": (
        JSON,
        completion([{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": 7}]),
    ),
}


def sse(*events: Any) -> bytes:
    frames = [e if isinstance(e, bytes) else json.dumps(e).encode() for e in events]
    return b"".join(b"data: " + f + b"\n\n" for f in frames)


def chunk(choices: Any, **extra: Any) -> dict[str, Any]:
    return {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": choices,
        **extra,
    }


def delta(finish: str | None = "stop", **fields: Any) -> list[dict[str, Any]]:
    return [{"index": 0, "delta": fields, "finish_reason": finish}]


SSE = "text/event-stream"
MALFORMED_STREAMS: dict[str, tuple[str, bytes]] = {
    "html page": ("text/html", f"<html><body>{PROVIDER_TEXT}</body></html>".encode()),
    "a json completion": (JSON, completion(message(content="hi"))),
    "chunk not json": (SSE, sse(b'{"choices": [' + PROVIDER_TEXT.encode(), b"[DONE]")),
    "chunk null": (SSE, sse(b"null", b"[DONE]")),
    "chunk a list": (SSE, sse(b"[1]", b"[DONE]")),
    "chunk a string": (SSE, sse(json.dumps(PROVIDER_TEXT).encode(), b"[DONE]")),
    "choices a string": (SSE, sse(chunk(PROVIDER_TEXT), b"[DONE]")),
    "choice a number": (SSE, sse(chunk([3]), b"[DONE]")),
    "delta a string": (SSE, sse(chunk([{"index": 0, "delta": "hi", "finish_reason": "stop"}]), b"[DONE]")),
    "content a number": (SSE, sse(chunk(delta(content=5)), b"[DONE]")),
    "tool_calls a string": (SSE, sse(chunk(delta("tool_calls", tool_calls="x")), b"[DONE]")),
    "tool call index a string": (
        SSE,
        sse(
            chunk(delta("tool_calls", tool_calls=[{"index": "a", "id": "c", "function": {"name": "f"}}])),
            b"[DONE]",
        ),
    ),
    "tool call arguments a number": (
        SSE,
        sse(
            chunk(
                delta(
                    "tool_calls",
                    tool_calls=[{"index": 0, "id": "c", "function": {"name": "f", "arguments": 4}}],
                )
            ),
            b"[DONE]",
        ),
    ),
    "finish_reason a number": (SSE, sse(chunk(delta(7, content="hi")), b"[DONE]")),
    "an error event": (SSE, sse({"error": {"message": f"{PROVIDER_TEXT} {SECRET}"}})),
}


class RawServer:
    """Answers every POST with the scripted (content type, body), status 200."""

    def __init__(self) -> None:
        self.reply: tuple[str, bytes] = (JSON, b"{}")
        self.status = 200
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                content_type, body = server.reply
                try:
                    self.send_response(server.status)
                    self.send_header("Content-Type", content_type)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

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


def model_for(server: RawServer) -> OpenAIChatModel:
    return OpenAIChatModel("m", base_url=server.base_url, api_key=SECRET, max_retries=0)


REQUEST = ModelRequest(messages=[Message.create("user", "hi")])


def check(error: ModelError, server: RawServer) -> None:
    assert isinstance(error, ModelResponseError), repr(error)
    assert error.public_message == "The model provider sent a reply memproc could not read."
    assert SECRET not in str(error)
    for public in (error.public_message, error.code):
        assert PROVIDER_TEXT not in public and server.base_url not in public


@pytest.mark.parametrize("kind", sorted(MALFORMED))
def test_generate_refuses_a_malformed_reply(kind: str, raw_server: RawServer, caplog) -> None:
    raw_server.reply = MALFORMED[kind]
    with caplog.at_level(logging.WARNING, logger="memproc.llm.openai"), pytest.raises(ModelError) as caught:
        model_for(raw_server).generate(REQUEST)
    check(caught.value, raw_server)
    # What went wrong is in the server log, for the operator, with where it came from.
    assert raw_server.base_url in caplog.text and "openai/m" in caplog.text


@pytest.mark.parametrize("kind", sorted(MALFORMED))
def test_agenerate_refuses_a_malformed_reply(kind: str, raw_server: RawServer) -> None:
    raw_server.reply = MALFORMED[kind]
    with pytest.raises(ModelError) as caught:
        asyncio.run(model_for(raw_server).agenerate(REQUEST))
    check(caught.value, raw_server)


@pytest.mark.parametrize("kind", sorted(MALFORMED_STREAMS))
def test_stream_refuses_a_malformed_reply(kind: str, raw_server: RawServer) -> None:
    raw_server.reply = MALFORMED_STREAMS[kind]
    with pytest.raises(ModelError) as caught:
        list(model_for(raw_server).stream(REQUEST))
    check(caught.value, raw_server)


@pytest.mark.parametrize("kind", sorted(MALFORMED_STREAMS))
def test_astream_refuses_a_malformed_reply(kind: str, raw_server: RawServer) -> None:
    raw_server.reply = MALFORMED_STREAMS[kind]

    async def consume() -> list[Any]:
        return [event async for event in model_for(raw_server).astream(REQUEST)]

    with pytest.raises(ModelError) as caught:
        asyncio.run(consume())
    check(caught.value, raw_server)


# --- what stays accepted --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body, text, finish",
    [
        (completion(message(content="hi")), "hi", "stop"),
        (completion(message(content=None, refusal="I cannot")), "I cannot", "stop"),
        (
            completion(
                [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": None}]
            ),
            "hi",
            "stop",
        ),
        (completion(message(content="hi"), usage={"prompt_tokens": "many"}), "hi", "stop"),
        (completion(message(content="hi"), usage="lots"), "hi", "stop"),
    ],
)
def test_well_formed_but_unusual_replies_still_work(body: bytes, text: str, finish: str, raw_server) -> None:
    raw_server.reply = (JSON, body)
    response = model_for(raw_server).generate(REQUEST)
    assert (response.text, response.finish_reason) == (text, finish)
    assert all(isinstance(v, int) for v in response.usage.values())


def test_tool_call_arguments_given_as_an_object_are_accepted(raw_server: RawServer) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"q": "x"}}}
    raw_server.reply = (JSON, completion(message(content=None, tool_calls=[call])))
    (parsed,) = model_for(raw_server).generate(REQUEST).tool_calls
    assert (parsed.id, parsed.name, parsed.args) == ("c1", "f", {"q": "x"})


def test_a_stream_with_odd_but_valid_chunks_still_works(raw_server: RawServer) -> None:
    raw_server.reply = (
        SSE,
        sse(
            chunk([]),
            chunk(delta(None, content="he")),
            chunk([{"index": 0, "delta": None, "finish_reason": None}]),
            chunk(delta("stop", content="llo")),
            chunk([], usage={"prompt_tokens": 1, "completion_tokens": 2}),
            b"[DONE]",
        ),
    )
    events = list(model_for(raw_server).stream(REQUEST))
    assert [e.text for e in events if e.type == "text-delta"] == ["he", "llo"]
    assert events[-1].type == "finish" and events[-1].usage == {
        "prompt_tokens": 1,
        "completion_tokens": 2,
        "total_tokens": 3,
    }
