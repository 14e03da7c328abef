"""What goes wrong while talking to an OpenAI-compatible provider becomes a `ModelError`, logged once.

The error class says whether a later retry can help (`ModelUnavailableError`,
`ModelRateLimitError`). Every error leaving `provider_failures` is masked (`memproc.redaction`: the
key, key-like tokens, URL credentials and, without TRACE_CONTENT, quotes of the request's text) and
carries no chained original: the SDK's exception holds the provider's own text, which spans, log
records and tracebacks would otherwise print. With TRACE_CONTENT, a DEBUG line has the original.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from memproc import logs, redaction
from memproc.conf import settings
from memproc.exceptions import (
    MemprocError,
    ModelAuthenticationError,
    ModelContextLengthError,
    ModelError,
    ModelRateLimitError,
    ModelResponseError,
    ModelUnavailableError,
)
from memproc.llm.openai_options import Options, sdk

# How much of a provider's own text the log keeps.
LOGGED_TEXT_CHARS = 500
# Python errors that mean "the reply does not have the shape the protocol promises" while reading it.
SHAPE_ERRORS = (AttributeError, TypeError, ValueError, KeyError, IndexError)

# The adapter's logger, named in the docs (guides/observability.md): its failures are logged under
# `memproc.llm.openai`.
logger = logging.getLogger("memproc.llm.openai")


@contextmanager
def provider_failures(*, model_id: str, options: Options, params: Mapping[str, Any]) -> Iterator[None]:
    """Turns whatever goes wrong while talking to the provider or reading its reply into a
    `ModelError`, logged here once with the details; memproc's own errors pass through."""
    try:
        yield
    except ModelError as exc:
        _mask(exc, options, params)
        _log(exc, model_id, options)
        raise exc from None
    except MemprocError:
        raise
    except sdk().OpenAIError as exc:
        error = _mask(provider_error(exc, model_id=model_id, options=options), options, params)
        _log(error, model_id, options, status=getattr(exc, "status_code", None), original=exc)
        raise error from None
    except SHAPE_ERRORS as exc:  # the SDK could not parse the body, or it has the wrong shape
        error = _mask(
            ModelResponseError(
                f"{model_id}{_at(options)} sent a reply memproc could not read: "
                f"{type(exc).__name__}: {clip(str(exc))}"
            ),
            options,
            params,
        )
        _log(error, model_id, options, original=exc)
        raise error from None


def provider_error(exc: Exception, *, model_id: str, options: Options) -> ModelError:
    """The memproc error for an SDK error: the class says whether a retry can help. Its text, for
    the server log, has the provider's own message (the key masked); `public_message` does not."""
    if isinstance(exc, ModelError):
        return exc
    openai = sdk()
    target = _at(options)
    if isinstance(exc, openai.APITimeoutError):
        return ModelUnavailableError(f"{model_id}{target} timed out after {options.timeout:g}s")
    if isinstance(exc, openai.APIConnectionError):
        return ModelUnavailableError(f"{model_id}{target} is unreachable: {_cause(exc)}")
    said = options.api_key.redact(_provider_message(exc))
    if isinstance(exc, openai.APIError) and _too_long(exc, said):
        status = getattr(exc, "status_code", None)
        answered = f"answered HTTP {status}" if status is not None else "failed"
        return ModelContextLengthError(f"{model_id}{target} {answered}: {said}", **_context_counts(said))
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        message = f"{model_id}{target} answered HTTP {status}: {said}"
        if status in (401, 403):
            return ModelAuthenticationError(message)
        if status == 429:
            return ModelRateLimitError(message)
        if status >= 500:
            return ModelUnavailableError(message)
        return ModelResponseError(message, public_message="The model provider refused the request.")
    if isinstance(exc, openai.APIError):  # e.g. an error event inside a stream
        return ModelResponseError(f"{model_id}{target} failed: {said}")
    return ModelResponseError(f"{model_id}{target} failed: {type(exc).__name__}: {clip(said)}")


# OpenAI's code for a request longer than the context window, and the words of its message, which
# servers that speak the protocol without the code (vLLM, LiteLLM) copy.
CONTEXT_LENGTH_CODE = "context_length_exceeded"
_TOO_LONG = re.compile(r"maximum context length", re.IGNORECASE)
_LIMIT = re.compile(r"maximum context length is (\d+)", re.IGNORECASE)
_REQUESTED = (
    re.compile(r"(\d+) in the messages", re.IGNORECASE),
    re.compile(r"messages resulted in (\d+)", re.IGNORECASE),
    re.compile(r"requested (\d+)", re.IGNORECASE),
)


def _too_long(exc: Any, said: str) -> bool:
    """Whether the provider refused the request as longer than the model's context window."""
    if getattr(exc, "code", None) == CONTEXT_LENGTH_CODE:
        return True
    status = getattr(exc, "status_code", None)
    return status in (400, 413, None) and bool(_TOO_LONG.search(said))


def _context_counts(said: str) -> dict[str, int | None]:
    """The window and the request's size in tokens, as the provider's message states them (OpenAI:
    "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000
    tokens."); None where it says nothing."""
    limit = _LIMIT.search(said)
    requested = next((m for m in (p.search(said) for p in _REQUESTED) if m is not None), None)
    return {
        "limit": int(limit.group(1)) if limit else None,
        "requested": int(requested.group(1)) if requested else None,
    }


def clip(text: str) -> str:
    return text if len(text) <= LOGGED_TEXT_CHARS else text[:LOGGED_TEXT_CHARS] + "..."


def _mask(error: ModelError, options: Options, params: Mapping[str, Any]) -> ModelError:
    """`error` with its text masked in place (the class, traceback and public message stay)."""
    error.args = (redaction.scrub(str(error), secrets=[options.api_key], content=_request_texts(params)),)
    return error


def _log(
    error: ModelError,
    model_id: str,
    options: Options,
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
        model_id,
        error.code,
        status if status is not None else "-",
        base_url or "the provider's default",
        str(error),
        extra={
            "model_id": model_id,
            "base_url": base_url,
            "provider_status": status,
            "error_code": error.code,
        },
    )
    if original is not None and settings.TRACE_CONTENT and logger.isEnabledFor(logging.DEBUG):
        logs.failure(
            logger,
            "memproc: model %s failed; the provider's error (TRACE_CONTENT is on): %s",
            model_id,
            redaction.scrub(str(original), secrets=[options.api_key]),
            exc=original,
            level=logging.DEBUG,
        )


def _at(options: Options) -> str:
    return f" at {options.base_url}" if options.base_url else ""


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


def _provider_message(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, Mapping):
        message = body.get("message") or body.get("error")
        if isinstance(message, Mapping):
            message = message.get("message")
        if message:
            return str(message)
    if isinstance(body, str) and body.strip():
        return clip(body.strip())
    return clip(str(getattr(exc, "message", None) or exc))


def _cause(exc: BaseException) -> str:
    cause = exc.__cause__ or exc.__context__
    return f"{type(cause).__name__}: {cause}" if cause else str(exc)
