"""The HTTP side of the loopback OpenAI-compatible server: routes, authorization, JSON and SSE.

`OpenAICompatibleServer` (memproc.testing.openai_server) owns the script, the recorded requests and
the life cycle; the handler here reads a request, checks it and writes what the script says.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from memproc.testing.openai_checks import conversation_error
from memproc.testing.openai_replies import (
    Completion,
    as_text,
    b64,
    completion_for,
    completion_usage,
    context_length_error,
    delay_of,
    embed,
    is_error,
    is_token_list,
    prompt_tokens,
    stream_chunks,
)

if TYPE_CHECKING:
    from memproc.testing.openai_server import OpenAICompatibleServer


class LoopbackHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    # listen() backlog (socketserver's default is 5): 150 clients connecting at once would otherwise
    # overflow it, and the kernel drops their SYNs, to be retried 1 s, 3 s, ... later.
    request_queue_size = 512
    owner: OpenAICompatibleServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that timed out and hung up is expected here, not an error to print


class RequestHandler(BaseHTTPRequestHandler):
    server: LoopbackHTTPServer
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
        invalid = conversation_error(body)
        if invalid is not None:
            self._reject(400, invalid, "invalid_request_error", param="messages")
            return
        limit = owner.context_tokens
        if limit is not None and (requested := prompt_tokens(body)) > limit:
            self._json(400, {"error": context_length_error(limit, requested)})
            return
        reply = owner._next("chat")
        owner._wait(owner.delay + delay_of(reply))
        if is_error(reply):
            self._scripted_error(reply)
            return
        completion = completion_for(reply, body, owner)
        model = str(body.get("model") or "test-model")
        usage = completion_usage(body, completion)
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            stream_usage = usage if include_usage else None
            chunks = stream_chunks(completion, model, owner._new_id("chatcmpl"), stream_usage)
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
        owner._wait(owner.delay + delay_of(reply))
        if is_error(reply):
            self._scripted_error(reply)
            return
        raw = body.get("input")
        texts = [raw] if isinstance(raw, str) or is_token_list(raw) else list(raw or [])
        dimensions = body.get("dimensions") or owner.dimensions
        if isinstance(dimensions, bool) or not isinstance(dimensions, int) or dimensions <= 0:
            self._reject(
                400, f"dimensions must be a positive integer, not {dimensions!r}", "invalid_request_error"
            )
            return
        scripted = reply.get("vectors") if isinstance(reply, Mapping) else None
        vectors = list(scripted) if scripted else [embed(as_text(t), dimensions) for t in texts]
        base64_format = body.get("encoding_format") == "base64"
        data = [
            {"object": "embedding", "index": i, "embedding": b64(v) if base64_format else v}
            for i, v in enumerate(vectors)
        ]
        tokens = sum(len(as_text(t).split()) for t in texts)
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
        self.server.owner._record_rejection(status, self.path, error, self.body)
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

    def _sse(self, chunks: Iterator[dict[str, Any]], completion: Completion) -> None:
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
