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
import json
import logging
import os
import threading
import uuid
import weakref
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from memproc import logs, redaction
from memproc.conf import settings
from memproc.events import StreamEvent
from memproc.exceptions import (
    ConfigurationError,
    MemprocError,
    ModelAuthenticationError,
    ModelError,
    ModelRateLimitError,
    ModelResponseError,
    ModelUnavailableError,
)
from memproc.llm.secret import Secret
from memproc.llm.types import ModelRequest, ModelResponse, ToolCall
from memproc.messages import to_openai

__all__ = ["OpenAIChatModel"]

DEFAULT_TIMEOUT = 60.0
DEFAULT_MAX_RETRIES = 2
# Local servers ignore the key, but the SDK refuses to build a client without one.
PLACEHOLDER_API_KEY = "not-needed"
# How much of a provider's own text the log keeps.
LOGGED_TEXT_CHARS = 500
# Python errors that mean "the reply does not have the shape the protocol promises" while reading it.
_SHAPE_ERRORS = (AttributeError, TypeError, ValueError, KeyError, IndexError)

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Options:
    api_key: Secret  # masked in this dataclass's repr, and so on Django's DEBUG page
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
        self._api_key = Secret(api_key) if api_key is not None else None
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
        configured = _provider_settings(self.provider)
        use_env = self.provider == "openai"
        api_key = (
            self._api_key or configured.get("api_key") or (use_env and _environ_secret("OPENAI_API_KEY"))
        )
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
        _check_timeout(timeout, where=f'MEMPROC["MODELS"][{self.provider!r}]["timeout"]')
        max_retries = (
            self._max_retries
            if self._max_retries is not None
            else configured.get("max_retries", DEFAULT_MAX_RETRIES)
        )
        _check_retries(max_retries, where=f'MEMPROC["MODELS"][{self.provider!r}]["max_retries"]')
        extra_body = self._extra_body if self._extra_body is not None else configured.get("extra_body") or {}
        return _Options(Secret(api_key), base_url, float(timeout), int(max_retries), dict(extra_body))

    @property
    def client(self) -> Any:
        """The SDK client for the current options; rebuilt only when they change."""
        return self._client_for(self.options())

    def _client_for(self, options: _Options) -> Any:
        with self._lock:
            if self._client is None or self._client_options != options:
                self._client = _sdk().OpenAI(
                    api_key=options.api_key.reveal(),
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
        with self._failures(options, params):
            return self._response(client.chat.completions.create(**params))

    async def agenerate(self, request: ModelRequest) -> ModelResponse:
        options = self.options()
        client = self._async_client_for(options)
        params = self._params(request, options)
        with self._failures(options, params):
            return self._response(await client.chat.completions.create(**params))

    def stream(self, request: ModelRequest) -> Iterator[StreamEvent]:
        """Text deltas as they arrive; each tool call once, complete; then `finish` with usage."""
        options = self.options()
        client = self._client_for(options)
        params = self._params(request, options)
        with self._failures(options, params):
            stream = client.chat.completions.create(
                **params, stream=True, stream_options={"include_usage": True}
            )
        state = _StreamState(self, stream)
        try:
            with self._failures(options, params):
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
        with self._failures(options, params):
            stream = await client.chat.completions.create(
                **params, stream=True, stream_options={"include_usage": True}
            )
        state = _StreamState(self, stream)
        try:
            with self._failures(options, params):
                async for chunk in stream:
                    for event in state.feed(chunk):
                        yield event
                finish = state.finish()
        finally:
            await stream.close()
        yield finish

    def _response(self, completion: Any) -> ModelResponse:
        choices = _reply_list(completion, "choices")
        if not choices:
            raise ModelResponseError(f"{self.id} answered with no choices")
        choice = choices[0]
        message = _reply_object(_field(choice, "message"), "choices[0].message")
        content = _optional_text(_field(message, "content"), "message.content")
        refusal = _optional_text(_field(message, "refusal"), "message.refusal")
        raw_calls = _field(message, "tool_calls")
        if raw_calls is not None and not isinstance(raw_calls, list):
            raise ModelResponseError(f"{self.id} sent message.tool_calls that is not a list")
        tool_calls = []
        for index, call in enumerate(raw_calls or ()):
            call = _reply_object(call, f"tool_calls[{index}]")
            function = _field(call, "function")
            if function is None:
                continue  # not a function call (a custom tool type memproc does not offer)
            function = _reply_object(function, f"tool_calls[{index}].function")
            tool_calls.append(
                self._tool_call(
                    _optional_text(_field(call, "id"), f"tool_calls[{index}].id"),
                    _optional_text(_field(function, "name"), f"tool_calls[{index}].function.name"),
                    _arguments(_field(function, "arguments"), f"tool_calls[{index}].function.arguments"),
                    index,
                )
            )
        finish_reason = _optional_text(_field(choice, "finish_reason"), "choices[0].finish_reason")
        return ModelResponse(
            text=content or refusal or "",
            tool_calls=tool_calls,
            usage=_usage(_field(completion, "usage")),
            finish_reason=finish_reason or ("tool_calls" if tool_calls else "stop"),
        )

    # --- helpers --------------------------------------------------------------------------------

    def _params(self, request: ModelRequest, options: _Options) -> dict[str, Any]:
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

    def _tool_call(
        self, call_id: str | None, name: str | None, arguments: str | Mapping[str, Any] | None, index: int
    ) -> ToolCall:
        if not name:
            raise ModelResponseError(f"{self.id} sent tool call #{index} without a function name")
        if isinstance(arguments, Mapping):  # already an object: some local servers send it unencoded
            return ToolCall(id=call_id or f"call_{uuid.uuid4().hex[:24]}", name=name, args=dict(arguments))
        try:
            args = json.loads(arguments) if arguments and arguments.strip() else {}
        except ValueError:
            raise ModelResponseError(
                f"{self.id} sent tool call {name!r} with arguments that are not valid JSON: "
                f"{_shown(arguments)}"
            ) from None
        if not isinstance(args, dict):
            raise ModelResponseError(
                f"{self.id} sent tool call {name!r} with arguments that are not a JSON object: "
                f"{_shown(arguments)}"
            )
        # Some local servers omit the id; the agent loop needs one to pair the result with the call.
        return ToolCall(id=call_id or f"call_{uuid.uuid4().hex[:24]}", name=name, args=args)

    def _tool_call_events(self, calls: _ToolCallAssembler) -> Iterator[StreamEvent]:
        for index, (call_id, name, arguments) in calls.drain():
            yield StreamEvent(type="tool-call", tool_call=self._tool_call(call_id, name, arguments, index))

    @contextmanager
    def _failures(self, options: _Options, params: Mapping[str, Any]) -> Iterator[None]:
        """Turns whatever goes wrong while talking to the provider or reading its reply into a
        `ModelError`, logged here once with the details; memproc's own errors pass through.

        Every error leaving here is masked (`memproc.redaction.scrub`: the key, key-like tokens, URL
        credentials and, without TRACE_CONTENT, quotes of the request's text) and carries no chained
        original: the SDK's exception holds the provider's own text, which spans, log records and
        tracebacks would otherwise print. With TRACE_CONTENT, a DEBUG line has the original."""
        try:
            yield
        except ModelError as exc:
            self._mask(exc, options, params)
            self._log(exc, options)
            raise exc from None
        except MemprocError:
            raise
        except _sdk().OpenAIError as exc:
            error = self._mask(self._error(exc, options), options, params)
            self._log(error, options, status=getattr(exc, "status_code", None), original=exc)
            raise error from None
        except _SHAPE_ERRORS as exc:  # the SDK could not parse the body, or it has the wrong shape
            error = self._mask(
                ModelResponseError(
                    f"{self.id}{_at(options)} sent a reply memproc could not read: "
                    f"{type(exc).__name__}: {_clip(str(exc))}"
                ),
                options,
                params,
            )
            self._log(error, options, original=exc)
            raise error from None

    def _mask(self, error: ModelError, options: _Options, params: Mapping[str, Any]) -> ModelError:
        """`error` with its text masked in place (the class, traceback and public message stay)."""
        error.args = (redaction.scrub(str(error), secrets=[options.api_key], content=_request_texts(params)),)
        return error

    def _error(self, exc: Exception, options: _Options | None = None) -> ModelError:
        """The memproc error for an SDK error: the class says whether a retry can help. Its text, for
        the server log, has the provider's own message (the key masked); `public_message` does not."""
        if isinstance(exc, ModelError):
            return exc
        sdk = _sdk()
        where = options or self._options_or_none()
        target = _at(where)
        if isinstance(exc, sdk.APITimeoutError):
            timeout = f" after {where.timeout:g}s" if where else ""
            return ModelUnavailableError(f"{self.id}{target} timed out{timeout}")
        if isinstance(exc, sdk.APIConnectionError):
            return ModelUnavailableError(f"{self.id}{target} is unreachable: {_cause(exc)}")
        said = _provider_message(exc)
        if where is not None:
            said = where.api_key.redact(said)
        if isinstance(exc, sdk.APIStatusError):
            status = exc.status_code
            message = f"{self.id}{target} answered HTTP {status}: {said}"
            if status in (401, 403):
                return ModelAuthenticationError(message)
            if status == 429:
                return ModelRateLimitError(message)
            if status >= 500:
                return ModelUnavailableError(message)
            return ModelResponseError(message, public_message="The model provider refused the request.")
        if isinstance(exc, sdk.APIError):  # e.g. an error event inside a stream
            return ModelResponseError(f"{self.id}{target} failed: {said}")
        return ModelResponseError(f"{self.id}{target} failed: {type(exc).__name__}: {_clip(said)}")

    def _log(
        self,
        error: ModelError,
        options: _Options,
        *,
        status: int | None = None,
        original: BaseException | None = None,
    ) -> None:
        """The one server-log line for a failed call: the details the API caller is not shown, all
        masked; with TRACE_CONTENT, a DEBUG line with the provider's original error (its text with
        the key and credentials masked, the request's text kept)."""
        base_url = redaction.scrub(options.base_url) if options.base_url else None
        logger.warning(
            "memproc: model %s failed (%s; HTTP status %s; base_url %s): %s",
            self.id,
            error.code,
            status if status is not None else "-",
            base_url or "the provider's default",
            str(error),
            extra={
                "model_id": self.id,
                "base_url": base_url,
                "provider_status": status,
                "error_code": error.code,
            },
        )
        if original is not None and settings.TRACE_CONTENT and logger.isEnabledFor(logging.DEBUG):
            logs.failure(
                logger,
                "memproc: model %s failed; the provider's error (TRACE_CONTENT is on): %s",
                self.id,
                redaction.scrub(str(original), secrets=[options.api_key]),
                exc=original,
                level=logging.DEBUG,
            )

    def _options_or_none(self) -> _Options | None:
        try:
            return self.options()
        except ConfigurationError:
            return None


class _StreamState:
    """What a stream has said so far: usage, the finish reason, tool-call fragments."""

    def __init__(self, model: OpenAIChatModel, stream: Any = None) -> None:
        self.model = model
        self.calls = _ToolCallAssembler()
        self.usage: dict[str, Any] = {}
        self.finish_reason: str | None = None
        self.chunks = 0
        self.content_type = _content_type(stream)

    def feed(self, chunk: Any) -> list[StreamEvent]:
        self.chunks += 1
        chunk = _reply_object(chunk, "a stream chunk")
        events: list[StreamEvent] = []
        usage = _field(chunk, "usage")
        if usage is not None:
            self.usage = _usage(usage)
        choices = _field(chunk, "choices")
        if choices is not None and not isinstance(choices, list):
            raise ModelResponseError(f"{self.model.id} sent a stream chunk whose choices are not a list")
        for choice in choices or ():
            choice = _reply_object(choice, "a stream chunk's choice")
            delta = _field(choice, "delta")
            if delta is not None:
                delta = _reply_object(delta, "a stream chunk's delta")
                content = _optional_text(_field(delta, "content"), "delta.content")
                if content:
                    events.append(StreamEvent(type="text-delta", text=content))
                fragments = _field(delta, "tool_calls")
                if fragments is not None and not isinstance(fragments, list):
                    raise ModelResponseError(f"{self.model.id} sent delta.tool_calls that is not a list")
                for fragment in fragments or ():
                    self.calls.add(_reply_object(fragment, "a tool-call fragment"))
            finish_reason = _optional_text(_field(choice, "finish_reason"), "finish_reason")
            if finish_reason:
                self.finish_reason = finish_reason
                events.extend(self.model._tool_call_events(self.calls))
        return events

    def finish(self) -> StreamEvent:
        if self.finish_reason is None:
            if not self.chunks and self.content_type and "event-stream" not in self.content_type:
                # Not a stream at all: an HTML error page, or a JSON answer to a streamed request.
                raise ModelResponseError(
                    f"{self.model.id} answered a streamed request with {self.content_type!r}, not events"
                )
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
        index = _field(fragment, "index")
        if index is None:
            index = len(self._calls)
        elif isinstance(index, bool) or not isinstance(index, int):
            raise ModelResponseError(f"a tool-call fragment has an index that is not an integer: {index!r}")
        call = self._calls.setdefault(index, [None, None, ""])
        call_id = _optional_text(_field(fragment, "id"), "tool call id")
        if call_id:
            call[0] = call_id
        function = _field(fragment, "function")
        if function is not None:
            function = _reply_object(function, "a tool-call fragment's function")
            name = _optional_text(_field(function, "name"), "tool call name")
            arguments = _optional_text(_field(function, "arguments"), "tool call arguments")
            if name and call[1] is None:
                call[1] = name
            if arguments:
                call[2] += arguments

    def drain(self) -> list[tuple[int, tuple[str | None, str | None, str]]]:
        calls = sorted((index, tuple(call)) for index, call in self._calls.items())
        self._calls.clear()
        return calls  # type: ignore[return-value]


def _sdk() -> Any:
    try:
        import openai
    except ImportError as exc:
        raise ConfigurationError(
            "The 'openai' package is needed for 'openai/...' models: pip install 'django-memproc[openai]'"
        ) from exc
    return openai


def _check_retries(value: Any, *, where: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 10:
        raise ConfigurationError(f"{where} must be an integer from 0 to 10, not {value!r}")


def _check_timeout(value: Any, *, where: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ConfigurationError(f"{where} must be a positive number of seconds, not {value!r}")


def _usage(usage: Any) -> dict[str, Any]:
    """Token counts; a count that is not a non-negative integer counts as unknown (0), since usage
    is bookkeeping, not the answer."""
    if usage is None:
        return {}
    prompt = _count(_field(usage, "prompt_tokens"))
    completion = _count(_field(usage, "completion_tokens"))
    total = _count(_field(usage, "total_tokens")) or prompt + completion
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": total}


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


# --- reading a reply: the SDK builds its objects without validation, so any field may hold anything


def _field(obj: Any, name: str) -> Any:
    """An attribute of an SDK object (None when absent); never of a str, list, number or None."""
    if isinstance(obj, _sdk().BaseModel):
        return getattr(obj, name, None)
    return None


def _reply_object(value: Any, what: str) -> Any:
    """`value` if the SDK could build an object of it (it was a JSON object), else a response error."""
    if not isinstance(value, _sdk().BaseModel):
        raise ModelResponseError(f"the provider sent {what} that is {_json_kind(value)}, not an object")
    return value


def _reply_list(obj: Any, name: str) -> list[Any]:
    if not isinstance(obj, _sdk().BaseModel):
        raise ModelResponseError(f"the provider's reply is {_json_kind(obj)}, not a chat completion")
    value = getattr(obj, name, None)
    if value is None:
        return []
    if not isinstance(value, list):
        raise ModelResponseError(f"the provider sent {name} that is {_json_kind(value)}, not a list")
    return value


def _optional_text(value: Any, what: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise ModelResponseError(f"the provider sent {what} that is {_json_kind(value)}, not a string")


def _arguments(value: Any, what: str) -> str | Mapping[str, Any] | None:
    if value is None or isinstance(value, (str, Mapping)):
        return value
    raise ModelResponseError(f"the provider sent {what} that is {_json_kind(value)}, not a string")


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (list, tuple)):
        return "a list"
    return f"a {type(value).__name__}"


def _content_type(stream: Any) -> str:
    response = getattr(stream, "response", None)
    headers = getattr(response, "headers", None)
    try:
        return str(headers.get("content-type") or "") if headers is not None else ""
    except Exception:  # a test double or an unusual transport: no content type to go by
        return ""


def _provider_settings(provider: str) -> dict[str, Any]:
    """`MEMPROC["MODELS"][provider]`, its `api_key` already a `Secret` (so no frame holds it bare)."""
    configured = (settings.MODELS or {}).get(provider) or {}
    if not isinstance(configured, Mapping):
        raise ConfigurationError(f'MEMPROC["MODELS"][{provider!r}] must be a dict')
    options = dict(configured)
    if options.get("api_key"):
        options["api_key"] = Secret(str(options["api_key"]))
    return options


def _environ_secret(name: str) -> Secret | None:
    value = os.environ.get(name)
    return Secret(value) if value else None


def _at(options: _Options | None) -> str:
    return f" at {options.base_url}" if options is not None and options.base_url else ""


def _shown(arguments: Any) -> str:
    """Tool-call arguments for an error's text: the model's output, so only with TRACE_CONTENT."""
    return _clip(repr(arguments)) if settings.TRACE_CONTENT else "(shown with TRACE_CONTENT)"


def _request_texts(params: Mapping[str, Any]) -> list[str]:
    """The request's messages as sent (its text, tool calls and results), for masking quotes of it."""
    return list(_strings((params.get("extra_body") or {}).get("messages") or []))


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings(item)


def _clip(text: str) -> str:
    return text if len(text) <= LOGGED_TEXT_CHARS else text[:LOGGED_TEXT_CHARS] + "..."


def _provider_message(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, Mapping):
        message = body.get("message") or body.get("error")
        if isinstance(message, Mapping):
            message = message.get("message")
        if message:
            return str(message)
    if isinstance(body, str) and body.strip():
        return _clip(body.strip())
    return _clip(str(getattr(exc, "message", None) or exc))


def _cause(exc: BaseException) -> str:
    cause = exc.__cause__ or exc.__context__
    return f"{type(cause).__name__}: {cause}" if cause else str(exc)
