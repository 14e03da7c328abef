"""The adapter for OpenAI-compatible chat-completions servers (OpenAI, Ollama, vLLM, llama.cpp, ...).

It speaks through the official `openai` SDK, imported on first use so that memproc installs without
it, sync (`generate`, `stream`) and natively async (`agenerate`, `astream`: the async turn awaits
them on the event loop). A request that fails with 429, 5xx, a timeout or a dropped connection is
retried by the SDK, `max_retries` times (default 2, per provider in `MEMPROC["MODELS"]`), with
exponential backoff and jitter, honouring the provider's `Retry-After`; a stream is retried only
before its first chunk, never after a delta reached the caller. The error class of what still fails
says whether a later retry can help (`ModelUnavailableError`, `ModelRateLimitError`).
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import uuid
import weakref
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from memproc.conf import settings
from memproc.events import StreamEvent
from memproc.exceptions import (
    ConfigurationError,
    ModelAuthenticationError,
    ModelError,
    ModelRateLimitError,
    ModelResponseError,
    ModelUnavailableError,
)
from memproc.llm.types import ModelRequest, ModelResponse, ToolCall
from memproc.messages import to_openai

__all__ = ["OpenAIChatModel"]

DEFAULT_TIMEOUT = 60.0
DEFAULT_MAX_RETRIES = 2
# Local servers ignore the key, but the SDK refuses to build a client without one.
PLACEHOLDER_API_KEY = "not-needed"


@dataclass(frozen=True)
class _Options:
    api_key: str
    base_url: str | None
    timeout: float
    max_retries: int = DEFAULT_MAX_RETRIES
    extra_body: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)


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
            _check_timeout(timeout, where="OpenAIChatModel(timeout=...)")
        if max_retries is not None:
            _check_retries(max_retries, where="OpenAIChatModel(max_retries=...)")
        if extra_body is not None and not isinstance(extra_body, Mapping):
            raise ConfigurationError("OpenAIChatModel(extra_body=...) must be a dict")
        if not isinstance(provider, str) or not provider or "/" in provider:
            raise ConfigurationError(
                f"OpenAIChatModel(provider=...) must be a name without '/', not {provider!r}"
            )
        self.model = model
        self.provider = provider
        self.id = f"{provider}/{model}"
        self._api_key = api_key
        self._base_url = base_url
        self._timeout = timeout
        self._max_retries = max_retries
        self._extra_body = dict(extra_body) if extra_body is not None else None
        self._client: Any = None
        self._client_options: _Options | None = None
        # Async clients hold connection pools bound to an event loop: one per loop (uvicorn has one).
        self._async_clients: weakref.WeakKeyDictionary[Any, tuple[_Options, Any]] = (
            weakref.WeakKeyDictionary()
        )
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"OpenAIChatModel({self.model!r}, provider={self.provider!r})"

    # --- configuration --------------------------------------------------------------------------

    def options(self) -> _Options:
        """The effective options, resolved now: arguments, then settings, then the environment."""
        configured = (settings.MODELS or {}).get(self.provider) or {}
        if not isinstance(configured, Mapping):
            raise ConfigurationError(f'MEMPROC["MODELS"][{self.provider!r}] must be a dict')
        use_env = self.provider == "openai"
        api_key = self._api_key or configured.get("api_key") or (use_env and os.environ.get("OPENAI_API_KEY"))
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
            api_key = PLACEHOLDER_API_KEY
        timeout = self._timeout if self._timeout is not None else configured.get("timeout", DEFAULT_TIMEOUT)
        _check_timeout(timeout, where=f'MEMPROC["MODELS"][{self.provider!r}]["timeout"]')
        max_retries = (
            self._max_retries
            if self._max_retries is not None
            else configured.get("max_retries", DEFAULT_MAX_RETRIES)
        )
        _check_retries(max_retries, where=f'MEMPROC["MODELS"][{self.provider!r}]["max_retries"]')
        extra_body = self._extra_body if self._extra_body is not None else configured.get("extra_body") or {}
        return _Options(str(api_key), base_url, float(timeout), int(max_retries), dict(extra_body))

    @property
    def client(self) -> Any:
        """The SDK client for the current options; rebuilt only when they change."""
        return self._client_for(self.options())

    def _client_for(self, options: _Options) -> Any:
        with self._lock:
            if self._client is None or self._client_options != options:
                self._client = _sdk().OpenAI(
                    api_key=options.api_key,
                    base_url=options.base_url,
                    timeout=options.timeout,
                    max_retries=options.max_retries,
                )
                self._client_options = options
            return self._client

    def _async_client_for(self, options: _Options) -> Any:
        loop = asyncio.get_running_loop()
        with self._lock:
            cached = self._async_clients.get(loop)
            if cached is None or cached[0] != options:
                client = _sdk().AsyncOpenAI(
                    api_key=options.api_key,
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
        try:
            completion = client.chat.completions.create(**self._params(request, options))
        except _sdk().OpenAIError as exc:
            raise self._error(exc) from exc
        return self._response(completion)

    async def agenerate(self, request: ModelRequest) -> ModelResponse:
        options = self.options()
        client = self._async_client_for(options)
        try:
            completion = await client.chat.completions.create(**self._params(request, options))
        except _sdk().OpenAIError as exc:
            raise self._error(exc) from exc
        return self._response(completion)

    def stream(self, request: ModelRequest) -> Iterator[StreamEvent]:
        """Text deltas as they arrive; each tool call once, complete; then `finish` with usage."""
        options = self.options()
        client = self._client_for(options)
        sdk = _sdk()
        try:
            stream = client.chat.completions.create(
                **self._params(request, options), stream=True, stream_options={"include_usage": True}
            )
        except sdk.OpenAIError as exc:
            raise self._error(exc) from exc
        state = _StreamState(self)
        try:
            for chunk in stream:
                yield from state.feed(chunk)
        except sdk.OpenAIError as exc:
            raise self._error(exc) from exc
        finally:
            stream.close()
        yield state.finish()

    async def astream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """`stream`, awaited on the event loop."""
        options = self.options()
        client = self._async_client_for(options)
        sdk = _sdk()
        try:
            stream = await client.chat.completions.create(
                **self._params(request, options), stream=True, stream_options={"include_usage": True}
            )
        except sdk.OpenAIError as exc:
            raise self._error(exc) from exc
        state = _StreamState(self)
        try:
            async for chunk in stream:
                for event in state.feed(chunk):
                    yield event
        except sdk.OpenAIError as exc:
            raise self._error(exc) from exc
        finally:
            await stream.close()
        yield state.finish()

    def _response(self, completion: Any) -> ModelResponse:
        if not completion.choices:
            raise ModelResponseError(f"{self.id} answered with no choices")
        choice = completion.choices[0]
        message = choice.message
        tool_calls = [
            self._tool_call(call.id, call.function.name, call.function.arguments, index)
            for index, call in enumerate(message.tool_calls or ())
            if getattr(call, "function", None) is not None
        ]
        return ModelResponse(
            text=message.content or getattr(message, "refusal", None) or "",
            tool_calls=tool_calls,
            usage=_usage(completion.usage),
            finish_reason=choice.finish_reason or ("tool_calls" if tool_calls else "stop"),
        )

    # --- helpers --------------------------------------------------------------------------------

    def _params(self, request: ModelRequest, options: _Options) -> dict[str, Any]:
        # The protocol promises system messages first; some local chat templates reject them later.
        ordered = [m for m in request.messages if m.role == "system"]
        ordered += [m for m in request.messages if m.role != "system"]
        params: dict[str, Any] = {"model": self.model, "messages": to_openai(ordered)}
        if request.tools:
            params["tools"] = [tool.to_openai() for tool in request.tools]
        if options.extra_body:
            params["extra_body"] = options.extra_body
        return params

    def _tool_call(
        self, call_id: str | None, name: str | None, arguments: str | None, index: int
    ) -> ToolCall:
        if not name:
            raise ModelResponseError(f"{self.id} sent tool call #{index} without a function name")
        try:
            args = json.loads(arguments) if arguments and arguments.strip() else {}
        except ValueError as exc:
            raise ModelResponseError(
                f"{self.id} sent tool call {name!r} with arguments that are not valid JSON: {arguments!r}"
            ) from exc
        if not isinstance(args, dict):
            raise ModelResponseError(
                f"{self.id} sent tool call {name!r} with arguments that are not a JSON object: {arguments!r}"
            )
        # Some local servers omit the id; the agent loop needs one to pair the result with the call.
        return ToolCall(id=call_id or f"call_{uuid.uuid4().hex[:24]}", name=name, args=args)

    def _tool_call_events(self, calls: _ToolCallAssembler) -> Iterator[StreamEvent]:
        for index, (call_id, name, arguments) in calls.drain():
            yield StreamEvent(type="tool-call", tool_call=self._tool_call(call_id, name, arguments, index))

    def _error(self, exc: Exception) -> ModelError:
        """The memproc error for an SDK error: the class says whether a retry can help."""
        if isinstance(exc, ModelError):
            return exc
        sdk = _sdk()
        where = self._options_or_none()
        target = f" at {where.base_url}" if where and where.base_url else ""
        if isinstance(exc, sdk.APITimeoutError):
            timeout = f" after {where.timeout:g}s" if where else ""
            return ModelUnavailableError(f"{self.id}{target} timed out{timeout}")
        if isinstance(exc, sdk.APIConnectionError):
            return ModelUnavailableError(f"{self.id}{target} is unreachable: {_cause(exc)}")
        if isinstance(exc, sdk.APIStatusError):
            status = exc.status_code
            message = f"{self.id}{target} answered HTTP {status}: {_provider_message(exc)}"
            if status in (401, 403):
                return ModelAuthenticationError(message)
            if status == 429:
                return ModelRateLimitError(message)
            if status >= 500:
                return ModelUnavailableError(message)
            return ModelResponseError(message)
        if isinstance(exc, sdk.APIError):  # e.g. an error event inside a stream
            return ModelResponseError(f"{self.id}{target} failed: {_provider_message(exc)}")
        return ModelResponseError(f"{self.id}{target} failed: {type(exc).__name__}: {exc}")

    def _options_or_none(self) -> _Options | None:
        try:
            return self.options()
        except ConfigurationError:
            return None


class _StreamState:
    """What a stream has said so far: usage, the finish reason, tool-call fragments."""

    def __init__(self, model: OpenAIChatModel) -> None:
        self.model = model
        self.calls = _ToolCallAssembler()
        self.usage: dict[str, Any] = {}
        self.finish_reason: str | None = None

    def feed(self, chunk: Any) -> list[StreamEvent]:
        events: list[StreamEvent] = []
        if chunk.usage is not None:
            self.usage = _usage(chunk.usage)
        for choice in chunk.choices or ():
            delta = choice.delta
            if delta is not None and delta.content:
                events.append(StreamEvent(type="text-delta", text=delta.content))
            for fragment in (delta.tool_calls if delta is not None else None) or ():
                self.calls.add(fragment)
            if choice.finish_reason:
                self.finish_reason = choice.finish_reason
                events.extend(self.model._tool_call_events(self.calls))
        return events

    def finish(self) -> StreamEvent:
        if self.finish_reason is None:
            # A dropped connection can look like a normal end; a truncated answer must not be saved.
            raise ModelUnavailableError(
                f"{self.model.id}: the stream ended before the model finished its answer"
            )
        return StreamEvent(type="finish", usage=self.usage, finish_reason=self.finish_reason)


class _ToolCallAssembler:
    """Joins streamed tool-call fragments: the id and name come first, arguments arrive in pieces."""

    def __init__(self) -> None:
        self._calls: dict[int, list[Any]] = {}

    def add(self, fragment: Any) -> None:
        index = fragment.index if fragment.index is not None else len(self._calls)
        call = self._calls.setdefault(index, [None, None, ""])
        if fragment.id:
            call[0] = fragment.id
        function = fragment.function
        if function is not None:
            if function.name and call[1] is None:
                call[1] = function.name
            if function.arguments:
                call[2] += function.arguments

    def drain(self) -> list[tuple[int, tuple[str | None, str | None, str]]]:
        calls = sorted((index, tuple(call)) for index, call in self._calls.items())
        self._calls.clear()
        return calls  # type: ignore[return-value]


def _sdk() -> Any:
    try:
        import openai
    except ImportError as exc:
        raise ConfigurationError(
            "The 'openai' package is needed for 'openai/...' models: pip install memproc[openai]"
        ) from exc
    return openai


def _check_retries(value: Any, *, where: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 10:
        raise ConfigurationError(f"{where} must be an integer from 0 to 10, not {value!r}")


def _check_timeout(value: Any, *, where: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ConfigurationError(f"{where} must be a positive number of seconds, not {value!r}")


def _usage(usage: Any) -> dict[str, Any]:
    if usage is None:
        return {}
    prompt = getattr(usage, "prompt_tokens", None) or 0
    completion = getattr(usage, "completion_tokens", None) or 0
    total = getattr(usage, "total_tokens", None) or prompt + completion
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": total}


def _provider_message(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, Mapping):
        message = body.get("message") or body.get("error")
        if isinstance(message, Mapping):
            message = message.get("message")
        if message:
            return str(message)
    if isinstance(body, str) and body.strip():
        return body.strip()[:500]
    return str(getattr(exc, "message", None) or exc)


def _cause(exc: BaseException) -> str:
    cause = exc.__cause__ or exc.__context__
    return f"{type(cause).__name__}: {cause}" if cause else str(exc)
