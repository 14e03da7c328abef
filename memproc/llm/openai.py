"""The adapter for OpenAI-compatible chat-completions servers (OpenAI, Ollama, vLLM, llama.cpp, ...).

It speaks through the official `openai` SDK, imported on first use so that memproc installs without
it, sync (`generate`, `stream`) and natively async (`agenerate`, `astream`: the async turn awaits
them on the event loop). A request that fails with 429, 5xx, a timeout or a dropped connection is
retried by the SDK, `max_retries` times (default 2, per provider in `MEMPROC["MODELS"]`), with
exponential backoff and jitter, honouring the provider's `Retry-After`; a stream is retried only
before its first chunk, never after a delta reached the caller. The error class of what still fails
says whether a later retry can help (`ModelUnavailableError`, `ModelRateLimitError`).

A reply memproc cannot read (not JSON, an HTML page, `message: null`, fields of the wrong type, no
choices) is a `ModelResponseError`, never a crash. Every error is logged here once, at WARNING, with
what the provider said, its status and the base_url, all masked (`memproc.redaction`: the key,
key-like tokens, URL credentials and, without TRACE_CONTENT, quotes of the request's text); the
exception's `public_message` (what the API answers) names only what failed. The error is raised
without the SDK's exception chained to it, so no span or traceback prints the provider's original
text; with TRACE_CONTENT a DEBUG line has it. The API key is a `Secret` from the moment it is read,
masked in reprs (Django's DEBUG page lists frame locals) and inside any provider text that quotes it.
"""

from __future__ import annotations

import asyncio
import os
import threading
import weakref
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

from memproc.events import StreamEvent
from memproc.exceptions import ConfigurationError
from memproc.llm.openai_errors import provider_failures
from memproc.llm.openai_options import (
    DEFAULT_MAX_RETRIES,
    DEFAULT_TIMEOUT,
    PLACEHOLDER_API_KEY,
    Options,
    check_retries,
    check_timeout,
    environ_secret,
    provider_settings,
    sdk,
)
from memproc.llm.openai_reply import completion_response
from memproc.llm.openai_stream import StreamState
from memproc.llm.secret import Secret
from memproc.llm.types import ModelRequest, ModelResponse
from memproc.messages import to_openai

__all__ = ["OpenAIChatModel"]


class OpenAIChatModel:
    """A `ChatModel` over `POST /chat/completions`, with tool calls and streaming.

    Options given here win; the rest come from `MEMPROC["MODELS"][provider]` and, for the `openai`
    provider, from the `OPENAI_API_KEY` / `OPENAI_BASE_URL` environment variables. They are read when
    the model is used, not when it is built, so an instance created at import time still follows
    `override_settings`. A `base_url` without a key is fine: local servers need none.
    """

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float | None = None,
        max_retries: int | None = None,
        extra_body: Mapping[str, Any] | None = None,
        provider: str = "openai",
    ) -> None:
        if not isinstance(model, str) or not model.strip():
            raise ConfigurationError("OpenAIChatModel(model=...) must be a non-empty model name")
        if api_key is not None and (not isinstance(api_key, str) or not api_key):
            raise ConfigurationError("OpenAIChatModel(api_key=...) must be a non-empty string")
        if base_url is not None and (not isinstance(base_url, str) or not base_url.startswith("http")):
            raise ConfigurationError(
                f"OpenAIChatModel(base_url=...) must be an http(s) URL, not {base_url!r}"
            )
        if timeout is not None:
            check_timeout(timeout, where="OpenAIChatModel(timeout=...)")
        if max_retries is not None:
            check_retries(max_retries, where="OpenAIChatModel(max_retries=...)")
        if extra_body is not None and not isinstance(extra_body, Mapping):
            raise ConfigurationError("OpenAIChatModel(extra_body=...) must be a dict")
        if not isinstance(provider, str) or not provider or "/" in provider:
            raise ConfigurationError(
                f"OpenAIChatModel(provider=...) must be a name without '/', not {provider!r}"
            )
        self.model = model
        self.provider = provider
        self.id = f"{provider}/{model}"
        self._api_key = Secret(api_key) if api_key is not None else None
        self._base_url = base_url
        self._timeout = timeout
        self._max_retries = max_retries
        self._extra_body = dict(extra_body) if extra_body is not None else None
        self._client: Any = None
        self._client_options: Options | None = None
        # Async clients hold connection pools bound to an event loop: one per loop (uvicorn has one).
        self._async_clients: weakref.WeakKeyDictionary[Any, tuple[Options, Any]] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"OpenAIChatModel({self.model!r}, provider={self.provider!r})"

    # --- configuration --------------------------------------------------------------------------

    def options(self) -> Options:
        """The effective options, resolved now: arguments, then settings, then the environment."""
        configured = provider_settings(self.provider)
        use_env = self.provider == "openai"
        api_key = self._api_key or configured.get("api_key") or (use_env and environ_secret("OPENAI_API_KEY"))
        base_url = (
            self._base_url
            or configured.get("base_url")
            or (use_env and os.environ.get("OPENAI_BASE_URL"))
            or None
        )
        if not api_key:
            if not base_url:
                env = " or the OPENAI_API_KEY environment variable" if use_env else ""
                raise ConfigurationError(
                    f"Model {self.id!r} has no API key: set MEMPROC['MODELS'][{self.provider!r}]['api_key']"
                    f"{env}, or a 'base_url' for a local server that needs no key"
                )
            api_key = Secret(PLACEHOLDER_API_KEY)
        timeout = self._timeout if self._timeout is not None else configured.get("timeout", DEFAULT_TIMEOUT)
        check_timeout(timeout, where=f'MEMPROC["MODELS"][{self.provider!r}]["timeout"]')
        max_retries = (
            self._max_retries
            if self._max_retries is not None
            else configured.get("max_retries", DEFAULT_MAX_RETRIES)
        )
        check_retries(max_retries, where=f'MEMPROC["MODELS"][{self.provider!r}]["max_retries"]')
        extra_body = self._extra_body if self._extra_body is not None else configured.get("extra_body") or {}
        return Options(Secret(api_key), base_url, float(timeout), int(max_retries), dict(extra_body))

    @property
    def client(self) -> Any:
        """The SDK client for the current options; rebuilt only when they change."""
        return self._client_for(self.options())

    def _client_for(self, options: Options) -> Any:
        with self._lock:
            if self._client is None or self._client_options != options:
                self._client = sdk().OpenAI(
                    api_key=options.api_key.reveal(),
                    base_url=options.base_url,
                    timeout=options.timeout,
                    max_retries=options.max_retries,
                )
                self._client_options = options
            return self._client

    def _async_client_for(self, options: Options) -> Any:
        loop = asyncio.get_running_loop()
        with self._lock:
            cached = self._async_clients.get(loop)
            if cached is None or cached[0] != options:
                client = sdk().AsyncOpenAI(
                    api_key=options.api_key.reveal(),
                    base_url=options.base_url,
                    timeout=options.timeout,
                    max_retries=options.max_retries,
                )
                cached = (options, client)
                self._async_clients[loop] = cached
            return cached[1]

    # --- ChatModel ------------------------------------------------------------------------------

    def generate(self, request: ModelRequest) -> ModelResponse:
        options = self.options()
        client = self._client_for(options)
        params = self._params(request, options)
        with provider_failures(model_id=self.id, options=options, params=params):
            return self._response(client.chat.completions.create(**params))

    async def agenerate(self, request: ModelRequest) -> ModelResponse:
        options = self.options()
        client = self._async_client_for(options)
        params = self._params(request, options)
        with provider_failures(model_id=self.id, options=options, params=params):
            return self._response(await client.chat.completions.create(**params))

    def stream(self, request: ModelRequest) -> Iterator[StreamEvent]:
        """Text deltas as they arrive; each tool call once, complete; then `finish` with usage."""
        options = self.options()
        client = self._client_for(options)
        params = self._params(request, options)
        with provider_failures(model_id=self.id, options=options, params=params):
            stream = client.chat.completions.create(
                **params, stream=True, stream_options={"include_usage": True}
            )
        state = StreamState(self.id, stream)
        try:
            with provider_failures(model_id=self.id, options=options, params=params):
                for chunk in stream:
                    yield from state.feed(chunk)
                finish = state.finish()
        finally:
            stream.close()
        yield finish

    async def astream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """`stream`, awaited on the event loop."""
        options = self.options()
        client = self._async_client_for(options)
        params = self._params(request, options)
        with provider_failures(model_id=self.id, options=options, params=params):
            stream = await client.chat.completions.create(
                **params, stream=True, stream_options={"include_usage": True}
            )
        state = StreamState(self.id, stream)
        try:
            with provider_failures(model_id=self.id, options=options, params=params):
                async for chunk in stream:
                    for event in state.feed(chunk):
                        yield event
                finish = state.finish()
        finally:
            await stream.close()
        yield finish

    def _response(self, completion: Any) -> ModelResponse:
        return completion_response(completion, model_id=self.id)

    def _params(self, request: ModelRequest, options: Options) -> dict[str, Any]:
        # The protocol promises system messages first; some local chat templates reject them later.
        ordered = [m for m in request.messages if m.role == "system"]
        ordered += [m for m in request.messages if m.role != "system"]
        # The messages and tools travel in `extra_body`, which the SDK merges into the JSON body as it
        # is: given as `messages=`, the SDK walks every message against its TypedDicts before sending
        # (~1.6 ms of CPU for a 13-message request, the largest part of a streamed turn's CPU under
        # ASGI). memproc builds them JSON-ready, so the request on the wire is the same.
        body: dict[str, Any] = {**options.extra_body, "messages": to_openai(ordered)}
        if request.tools:
            body["tools"] = [tool.to_openai() for tool in request.tools]
        return {"model": self.model, "messages": [], "extra_body": body}
