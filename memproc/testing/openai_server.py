"""A scriptable OpenAI-compatible HTTP server on loopback, for tests that must cross a real socket.

The `openai` SDK 3.x sends through `httpx2`, which `respx` cannot intercept; a real server also works
from other processes (a Celery worker, a browser-driven dev server). Only the standard library.

    with OpenAICompatibleServer(api_key="test") as server:
        server.enqueue("Hello!")                                                 # plain text
        server.enqueue({"tool_calls": [{"name": "lookup", "arguments": {"q": "x"}}]})
        server.enqueue({"status": 429, "message": "Slow down",                   # an error
                        "headers": {"Retry-After": "1"}})
        model = OpenAIChatModel("test-model", base_url=server.base_url, api_key="test")

With an empty queue the chat endpoint answers `Echo: <last user text>`. Run it on its own with
`python -m memproc.testing.openai_server --port 8099` (`--delay 1.0 --chunk-delay 0.05` for a model
that starts answering after 1 s and streams one word every 50 ms, as bench/concurrency.py does).

The chat endpoint is as strict about the conversation as the real API, so a test catches a
conversation that OpenAI would refuse: it answers 400 (`invalid_request_error`, `param: "messages"`)
to a missing or empty `messages`, a message without a valid role, a `tool` message without a
`tool_call_id` or one that does not answer a call of the assistant message right before its run of
tool messages, an assistant's `tool_calls` not all answered by the tool messages that follow it,
and a duplicate call id within one assistant message or one run of answers. Such a request is
checked before the script is read, so it uses up no scripted reply.

Every request the server refuses on its own (that 400, a 401, a 404, bad JSON; not a scripted
error) is kept in `server.rejected` as a `Rejection(status, path, error, request)`, so a test can
end with `assert server.rejected == []`.
"""

from __future__ import annotations

import base64
import itertools
import json
import math
import re
import struct
import threading
import time
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, NamedTuple

__all__ = ["OpenAICompatibleServer", "Rejection"]

Reply = str | Mapping[str, Any]
_ROLES = ("system", "developer", "user", "assistant", "tool")


class Rejection(NamedTuple):
    """A request the server refused on its own: what a client under test got wrong."""

    status: int
    path: str
    error: dict[str, Any]  # the `error` object that was sent back
    request: dict[str, Any] | None  # the request body, when it was a JSON object


@dataclass
class _Completion:
    content: str = ""
    tool_calls: list[dict[str, str]] = field(default_factory=list)  # {"id", "name", "arguments"}
    finish_reason: str = "stop"
    chunk_delay: float = 0.0  # seconds between stream chunks
    disconnect_after: int | None = None  # stream chunks sent before hanging up without [DONE]


class OpenAICompatibleServer:
    """`POST /v1/chat/completions` (plain, tool calls, SSE streaming) and `POST /v1/embeddings`.

    - `enqueue(reply)` scripts the next chat answers in order: a string, `{"content": ...,
      "tool_calls": [{"name", "arguments": dict or raw str, "id"?}]}`, or an error
      `{"status": 500, "message": ...}`. Any reply may carry `"delay": seconds` (before answering);
      a streamed one also `"chunk_delay": seconds` (between chunks) and `"disconnect_after": n`
      (hang up after n chunks, without `[DONE]`).
      `enqueue(reply, endpoint="embeddings")` scripts embeddings: an error, or `{"vectors": [...]}`.
    - `requests` holds every request body received (a snapshot list); `rejected` every request
      refused by the server itself (see the module docstring); `reset()` clears both and the queues.
    - Chat requests are validated like the real API's (see the module docstring) before the script
      is read: an invalid conversation gets a 400 at once and uses up no scripted reply.
    - `delay` seconds are waited before every scripted or echoed answer (for timeout tests);
      settable at any time. `chunk_delay` seconds are waited between the chunks of an echoed stream
      (a scripted reply brings its own), so a loopback model can stream at a realistic pace.
    - With `api_key` set, a request without `Authorization: Bearer <api_key>` gets a 401.
    - Embeddings are deterministic: each word of the text is hashed (FNV-1a) into one of
      `dimensions` (default 8, or the request's `dimensions`) slots and the vector L2-normalised, so
      texts sharing words are similar; these are the vectors of `HashEmbedder` and of the
      benchmark's embedder at the same size.
    - Streams send text one word per chunk and each tool call's arguments in several fragments,
      and usage in a final chunk when `stream_options.include_usage` is set, then `data: [DONE]`.
    """

    def __init__(
        self,
        *,
        api_key: str | None = None,
        dimensions: int = 8,
        delay: float = 0.0,
        chunk_delay: float = 0.0,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        if api_key is not None and (not isinstance(api_key, str) or not api_key):
            raise ValueError("api_key must be a non-empty string or None")
        if isinstance(dimensions, bool) or not isinstance(dimensions, int) or dimensions <= 0:
            raise ValueError(f"dimensions must be a positive int, not {dimensions!r}")
        if not isinstance(delay, (int, float)) or delay < 0:
            raise ValueError(f"delay must be a non-negative number of seconds, not {delay!r}")
        if not isinstance(chunk_delay, (int, float)) or chunk_delay < 0:
            raise ValueError(f"chunk_delay must be a non-negative number of seconds, not {chunk_delay!r}")
        self.api_key = api_key
        self.dimensions = dimensions
        self.delay = float(delay)
        self.chunk_delay = float(chunk_delay)
        self.host = host
        self.port = port
        self._lock = threading.Lock()
        self._requests: list[dict[str, Any]] = []
        self._rejected: list[Rejection] = []
        self._queues: dict[str, deque[Reply]] = {"chat": deque(), "embeddings": deque()}
        self._ids = itertools.count(1)
        self._stopping = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- life cycle -----------------------------------------------------------------------------

    def start(self) -> OpenAICompatibleServer:
        if self._httpd is not None:
            return self
        self._stopping.clear()
        httpd = _HTTPServer((self.host, self.port), _Handler)
        httpd.owner = self
        self._httpd = httpd
        self.port = httpd.server_address[1]
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="openai-test-server", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        self._stopping.set()  # wakes handlers sleeping on a delay
        httpd.shutdown()
        httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> OpenAICompatibleServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """The server root, e.g. `http://127.0.0.1:PORT`."""
        if self._httpd is None:
            raise RuntimeError("The server is not running; use it as a context manager or call start()")
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        """What to pass as `base_url` to the SDK: `http://127.0.0.1:PORT/v1`."""
        return f"{self.url}/v1"

    # --- scripting ------------------------------------------------------------------------------

    def enqueue(self, reply: Reply, *, endpoint: str = "chat") -> None:
        if endpoint not in self._queues:
            raise ValueError(f"endpoint must be one of {', '.join(self._queues)}, not {endpoint!r}")
        if not isinstance(reply, (str, Mapping)):
            raise TypeError(f"A reply must be a string or a dict, not {type(reply).__name__}")
        with self._lock:
            self._queues[endpoint].append(reply)

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Every request body received so far, oldest first (a copy)."""
        with self._lock:
            return list(self._requests)

    @property
    def rejected(self) -> list[Rejection]:
        """Every request refused by the server itself, oldest first (a copy); not scripted errors."""
        with self._lock:
            return list(self._rejected)

    def reset(self) -> None:
        with self._lock:
            self._requests.clear()
            self._rejected.clear()
            for queue in self._queues.values():
                queue.clear()

    # --- used by the handler --------------------------------------------------------------------

    def _record(self, body: dict[str, Any]) -> None:
        with self._lock:
            self._requests.append(body)

    def _record_rejection(self, rejection: Rejection) -> None:
        with self._lock:
            self._rejected.append(rejection)

    def _next(self, endpoint: str) -> Reply | None:
        with self._lock:
            queue = self._queues[endpoint]
            return queue.popleft() if queue else None

    def _wait(self, seconds: float) -> None:
        if seconds > 0:
            self._stopping.wait(seconds)

    def _new_id(self, prefix: str) -> str:
        return f"{prefix}-{next(self._ids)}"


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    # listen() backlog (socketserver's default is 5): 150 clients connecting at once would otherwise
    # overflow it, and the kernel drops their SYNs, to be retried 1 s, 3 s, ... later.
    request_queue_size = 512
    owner: OpenAICompatibleServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that timed out and hung up is expected here, not an error to print


class _Handler(BaseHTTPRequestHandler):
    server: _HTTPServer
    protocol_version = "HTTP/1.0"  # one request per connection: streams end when the socket closes
    body: dict[str, Any] | None = None  # this request's JSON body, kept for `Rejection.request`

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        if self.path.rstrip("/") == "/v1/models":
            if self._authorized():
                self._json(200, {"object": "list", "data": [{"id": "test-model", "object": "model"}]})
            return
        self._reject(404, f"No route for GET {self.path}", "not_found_error")

    def do_POST(self) -> None:
        owner = self.server.owner
        routes = {"/v1/chat/completions": self._chat, "/v1/embeddings": self._embeddings}
        route = routes.get(self.path.split("?", 1)[0].rstrip("/"))
        try:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            self._reject(400, "The request body is not valid JSON", "invalid_request_error")
            return
        if not isinstance(body, dict):
            self._reject(400, "The request body must be a JSON object", "invalid_request_error")
            return
        self.body = body
        owner._record(body)
        if route is None:
            self._reject(404, f"No route for POST {self.path}", "not_found_error")
            return
        if self._authorized():
            route(body)

    # --- endpoints ------------------------------------------------------------------------------

    def _chat(self, body: dict[str, Any]) -> None:
        owner = self.server.owner
        invalid = _conversation_error(body)
        if invalid is not None:
            self._reject(400, invalid, "invalid_request_error", param="messages")
            return
        reply = owner._next("chat")
        owner._wait(owner.delay + _delay_of(reply))
        if _is_error(reply):
            self._scripted_error(reply)
            return
        completion = _completion(reply, body, owner)
        model = str(body.get("model") or "test-model")
        usage = _usage(body, completion)
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            chunks = _chunks(completion, model, owner._new_id("chatcmpl"), usage if include_usage else None)
            self._sse(chunks, completion)
            return
        message: dict[str, Any] = {"role": "assistant", "content": completion.content or None}
        if completion.tool_calls:
            message["tool_calls"] = [
                {
                    "id": c["id"],
                    "type": "function",
                    "function": {"name": c["name"], "arguments": c["arguments"]},
                }
                for c in completion.tool_calls
            ]
        self._json(
            200,
            {
                "id": owner._new_id("chatcmpl"),
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model,
                "choices": [{"index": 0, "message": message, "finish_reason": completion.finish_reason}],
                "usage": usage,
            },
        )

    def _embeddings(self, body: dict[str, Any]) -> None:
        owner = self.server.owner
        reply = owner._next("embeddings")
        owner._wait(owner.delay + _delay_of(reply))
        if _is_error(reply):
            self._scripted_error(reply)
            return
        raw = body.get("input")
        texts = [raw] if isinstance(raw, str) or _is_token_list(raw) else list(raw or [])
        dimensions = body.get("dimensions") or owner.dimensions
        if isinstance(dimensions, bool) or not isinstance(dimensions, int) or dimensions <= 0:
            self._reject(
                400, f"dimensions must be a positive integer, not {dimensions!r}", "invalid_request_error"
            )
            return
        scripted = reply.get("vectors") if isinstance(reply, Mapping) else None
        vectors = list(scripted) if scripted else [_embed(_as_text(t), dimensions) for t in texts]
        base64_format = body.get("encoding_format") == "base64"
        data = [
            {"object": "embedding", "index": i, "embedding": _b64(v) if base64_format else v}
            for i, v in enumerate(vectors)
        ]
        tokens = sum(len(_as_text(t).split()) for t in texts)
        self._json(
            200,
            {
                "object": "list",
                "data": data,
                "model": str(body.get("model") or "test-embedding"),
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            },
        )

    # --- responses ------------------------------------------------------------------------------

    def _authorized(self) -> bool:
        expected = self.server.owner.api_key
        if expected is None or self.headers.get("Authorization") == f"Bearer {expected}":
            return True
        self._reject(401, "Incorrect API key provided.", "invalid_request_error", code="invalid_api_key")
        return False

    def _scripted_error(self, reply: Any) -> None:
        status = int(reply["status"])
        message = str(reply.get("message") or f"Scripted error {status}")
        kind = reply.get("type") or ("server_error" if status >= 500 else "invalid_request_error")
        error = {"message": message, "type": kind, "param": None, "code": reply.get("code")}
        self._json(status, {"error": error}, headers=reply.get("headers") or {})

    def _reject(
        self, status: int, message: str, kind: str, *, param: str | None = None, code: str | None = None
    ) -> None:
        """An error of the server's own making, recorded so a test can see what its client got wrong."""
        error = {"message": message, "type": kind, "param": param, "code": code}
        self.server.owner._record_rejection(Rejection(status, self.path, error, self.body))
        self._json(status, {"error": error})

    def _error(self, status: int, message: str, kind: str, *, code: str | None = None) -> None:
        self._json(status, {"error": {"message": message, "type": kind, "param": None, "code": code}})

    def _json(self, status: int, payload: Any, *, headers: Mapping[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            for name, value in (headers or {}).items():
                self.send_header(name, str(value))
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            pass  # the client gave up (a timeout test); nothing to answer

    def _sse(self, chunks: Iterator[dict[str, Any]], completion: _Completion) -> None:
        owner = self.server.owner
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.end_headers()
            for sent, chunk in enumerate(chunks):
                if sent == completion.disconnect_after:
                    return  # hang up mid-stream, as a crashed server or a dropped connection would
                if sent:
                    owner._wait(completion.chunk_delay)
                self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                self.wfile.flush()
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except OSError:
            pass


# --- request validation ---------------------------------------------------------------------------
# The real API's wording (its "preceeding" included), so a test may match on what OpenAI would say.

_NOT_A_RESPONSE = (
    "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with "
    "'tool_calls'."
)
_UNANSWERED = (
    "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
    "'tool_call_id'. The following tool_call_ids did not have response messages: {ids}"
)


def _conversation_error(body: dict[str, Any]) -> str | None:
    """Why the real API would refuse this request's `messages`, or None when it would accept them."""
    if "messages" not in body:
        return "Missing required parameter: 'messages'."
    messages = body["messages"]
    if not isinstance(messages, list):
        return f"Invalid type for 'messages': expected an array, but got {_json_type(messages)} instead."
    if not messages:
        return (
            "Invalid 'messages': empty array. Expected an array with minimum length 1, "
            "but got an empty array instead."
        )
    for index, message in enumerate(messages):
        if (error := _message_error(index, message)) is not None:
            return error
    return _pairing_error(messages)


def _message_error(index: int, message: Any) -> str | None:
    """The shape of one message on its own: an object, a known role, the ids that pair calls up."""
    where = f"messages[{index}]"
    if not isinstance(message, dict):
        return f"Invalid type for '{where}': expected an object, but got {_json_type(message)} instead."
    role = message.get("role")
    if role is None:
        return f"Missing required parameter: '{where}.role'."
    if role not in _ROLES:
        supported = ", ".join(f"'{r}'" for r in _ROLES[:-1])
        return f"Invalid value: {role!r}. Supported values are: {supported}, and '{_ROLES[-1]}'."
    if role == "tool" and not _is_id(message.get("tool_call_id")):
        return f"Missing required parameter: '{where}.tool_call_id'."
    if role == "assistant" and message.get("tool_calls") is not None:
        return _tool_calls_error(where, message["tool_calls"])
    return None


def _tool_calls_error(where: str, calls: Any) -> str | None:
    """An assistant's `tool_calls`: a non-empty list of calls, each with its own id."""
    if not isinstance(calls, list):
        return (
            f"Invalid type for '{where}.tool_calls': expected an array, but got {_json_type(calls)} instead."
        )
    if not calls:
        return (
            f"Invalid '{where}.tool_calls': empty array. Expected an array with minimum length 1, "
            "but got an empty array instead."
        )
    seen: set[str] = set()
    for index, call in enumerate(calls):
        call_id = call.get("id") if isinstance(call, dict) else None
        if not _is_id(call_id):
            return f"Missing required parameter: '{where}.tool_calls[{index}].id'."
        if call_id in seen:
            return f"Invalid parameter: Duplicate value for 'id' of {call_id!r} in '{where}.tool_calls'."
        seen.add(call_id)
    return None


def _pairing_error(messages: list[dict[str, Any]]) -> str | None:
    """Each run of tool messages answers the assistant message right before it, every call once."""
    expected: list[str] = []  # the call ids of the assistant message the current run answers
    answered: dict[str, int] = {}  # call id -> index of the tool message that answered it
    for index, message in enumerate(messages):
        if message["role"] == "tool":
            call_id = message["tool_call_id"]
            if call_id not in expected:
                return _NOT_A_RESPONSE
            if call_id in answered:
                return (
                    f"Invalid parameter: Duplicate value for 'tool_call_id' of {call_id!r} "
                    f"in messages[{answered[call_id]}] and messages[{index}]."
                )
            answered[call_id] = index
            continue
        if error := _unanswered_error(expected, answered):
            return error
        calls = message.get("tool_calls") if message["role"] == "assistant" else None
        expected = [call["id"] for call in calls or ()]
        answered = {}
    return _unanswered_error(expected, answered)


def _unanswered_error(expected: list[str], answered: dict[str, int]) -> str | None:
    missing = [call_id for call_id in expected if call_id not in answered]
    return _UNANSWERED.format(ids=", ".join(missing)) if missing else None


def _is_id(value: Any) -> bool:
    return isinstance(value, str) and bool(value)


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    names = {str: "a string", list: "an array", dict: "an object", type(None): "null"}
    return names.get(type(value), type(value).__name__)


# --- replies --------------------------------------------------------------------------------------


def _is_error(reply: Reply | None) -> bool:
    return isinstance(reply, Mapping) and "status" in reply


def _delay_of(reply: Reply | None) -> float:
    return float(reply.get("delay") or 0) if isinstance(reply, Mapping) else 0.0


def _completion(reply: Reply | None, body: dict[str, Any], owner: OpenAICompatibleServer) -> _Completion:
    if reply is None:
        return _Completion(content=f"Echo: {_last_user_text(body)}", chunk_delay=owner.chunk_delay)
    if isinstance(reply, str):
        return _Completion(content=reply)
    calls = [
        {
            "id": str(call.get("id") or owner._new_id("call")),
            "name": str(call["name"]),
            "arguments": call.get("arguments")
            if isinstance(call.get("arguments"), str)
            else json.dumps(call.get("arguments") or {}),
        }
        for call in reply.get("tool_calls") or ()
    ]
    content = str(reply.get("content") or reply.get("text") or "")
    finish = reply.get("finish_reason") or ("tool_calls" if calls else "stop")
    disconnect = reply.get("disconnect_after")
    return _Completion(
        content=content,
        tool_calls=calls,
        finish_reason=str(finish),
        chunk_delay=float(reply.get("chunk_delay") or 0),
        disconnect_after=int(disconnect) if disconnect is not None else None,
    )


def _last_user_text(body: dict[str, Any]) -> str:
    for message in reversed(body.get("messages") or []):
        if isinstance(message, dict) and message.get("role") == "user":
            return _content_text(message.get("content"))
    return ""


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text"
        )
    return ""


def _words(text: str) -> int:
    return len(text.split())


def _usage(body: dict[str, Any], completion: _Completion) -> dict[str, int]:
    prompt = sum(
        _words(_content_text(m.get("content"))) for m in body.get("messages") or [] if isinstance(m, dict)
    )
    answer = _words(completion.content) + sum(_words(c["arguments"]) for c in completion.tool_calls)
    return {"prompt_tokens": prompt, "completion_tokens": answer, "total_tokens": prompt + answer}


def _chunks(
    completion: _Completion, model: str, completion_id: str, usage: dict[str, int] | None
) -> Iterator[dict[str, Any]]:
    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        return {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        }

    yield chunk({"role": "assistant", "content": ""})
    for word in re.findall(r"\S+\s*|\s+", completion.content):
        yield chunk({"content": word})
    for index, call in enumerate(completion.tool_calls):
        head = {"index": index, "id": call["id"], "type": "function"}
        yield chunk({"tool_calls": [{**head, "function": {"name": call["name"], "arguments": ""}}]})
        for fragment in _fragments(call["arguments"], 3):
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]})
    yield chunk({}, completion.finish_reason)
    if usage is not None:
        yield {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
            "choices": [],
            "usage": usage,
        }


def _fragments(text: str, parts: int) -> list[str]:
    size = max(1, math.ceil(len(text) / parts))
    return [text[i : i + size] for i in range(0, len(text), size)]


# --- embeddings -----------------------------------------------------------------------------------


def _is_token_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, int) for v in value)


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else " ".join(str(v) for v in value)


def _embed(text: str, dimensions: int) -> list[float]:
    # The benchmark's embedder (and memproc.testing.HashEmbedder): FNV-1a-32 per word, +1 below 2**31.
    counts = [0] * dimensions
    for token in re.findall(r"[a-z0-9]+", text.lower()):
        value = 0x811C9DC5
        for byte in token.encode():
            value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
        counts[value % dimensions] += 1 if value < 2**31 else -1
    norm = math.sqrt(sum(c * c for c in counts))
    if norm == 0:
        return [1.0] + [0.0] * (dimensions - 1)
    return [c / norm for c in counts]


def _b64(vector: list[float]) -> str:
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")


def main(argv: list[str] | None = None) -> None:
    """Serves until interrupted, printing the base URL (for use from another process)."""
    import argparse

    parser = argparse.ArgumentParser(description="A scriptless OpenAI-compatible server that echoes.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--dimensions", type=int, default=8)
    parser.add_argument("--delay", type=float, default=0.0, help="seconds before every answer")
    parser.add_argument(
        "--chunk-delay", type=float, default=0.0, help="seconds between the chunks of a streamed answer"
    )
    args = parser.parse_args(argv)
    server = OpenAICompatibleServer(
        api_key=args.api_key,
        dimensions=args.dimensions,
        delay=args.delay,
        chunk_delay=args.chunk_delay,
        host=args.host,
        port=args.port,
    )
    with server:
        print(server.base_url, flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
