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

import itertools
import threading
from collections import deque
from collections.abc import Mapping
from typing import Any, NamedTuple

from memproc.testing.openai_http import LoopbackHTTPServer, RequestHandler
from memproc.testing.openai_replies import Reply

__all__ = ["OpenAICompatibleServer", "Rejection"]


class Rejection(NamedTuple):
    """A request the server refused on its own: what a client under test got wrong."""

    status: int
    path: str
    error: dict[str, Any]  # the `error` object that was sent back
    request: dict[str, Any] | None  # the request body, when it was a JSON object


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
    - With `context_tokens` set, a chat request whose messages hold more words than that (the
      server counts one token per word, as in its `usage`) gets the 400 OpenAI answers to a request
      longer than the context window (`code: "context_length_exceeded"`, `param: "messages"`, the
      message stating both counts), before the script is read; settable at any time.
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
        context_tokens: int | None = None,
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
        if context_tokens is not None and (
            isinstance(context_tokens, bool) or not isinstance(context_tokens, int)
        ):
            raise ValueError(f"context_tokens must be an int or None, not {context_tokens!r}")
        self.api_key = api_key
        self.context_tokens = context_tokens
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
        self._httpd: LoopbackHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- life cycle -----------------------------------------------------------------------------

    def start(self) -> OpenAICompatibleServer:
        if self._httpd is not None:
            return self
        self._stopping.clear()
        httpd = LoopbackHTTPServer((self.host, self.port), RequestHandler)
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

    def _record_rejection(
        self, status: int, path: str, error: dict[str, Any], request: dict[str, Any] | None
    ) -> None:
        with self._lock:
            self._rejected.append(Rejection(status, path, error, request))

    def _next(self, endpoint: str) -> Reply | None:
        with self._lock:
            queue = self._queues[endpoint]
            return queue.popleft() if queue else None

    def _wait(self, seconds: float) -> None:
        if seconds > 0:
            self._stopping.wait(seconds)

    def _new_id(self, prefix: str) -> str:
        return f"{prefix}-{next(self._ids)}"


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
