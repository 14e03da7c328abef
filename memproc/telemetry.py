"""OpenTelemetry spans for turns, when `opentelemetry-api` is installed (the `otel` extra).

Without it nothing is imported and every call here is a cheap no-op. Spans are started with an
explicit parent rather than as the "current" span: a turn's steps run in a generator and in worker
threads, where a current-span context would leak into the caller. The turn's own span takes as
parent whatever span was current when the turn was created (the request's, under
opentelemetry-instrumentation-django). Message content is recorded only with `TRACE_CONTENT`.

A failed span records its exception as `memproc.redaction` renders it: the class, the masked text and
the stack frames, never the exception's original text or chained cause (a provider's error may quote
the API key or the user's text).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from memproc import redaction

__all__ = ["NO_SPAN", "current_span", "enabled", "span", "start_span"]


class _NoSpan:
    """Stands in for a span when OpenTelemetry is not installed."""

    def set_attribute(self, key: str, value: Any) -> None:
        pass

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        pass

    def record_exception(self, exception: BaseException, attributes: Any = None) -> None:
        pass

    def set_status(self, *args: Any, **kwargs: Any) -> None:
        pass

    def end(self) -> None:
        pass

    def is_recording(self) -> bool:
        return False


NO_SPAN: Any = _NoSpan()


@functools.cache  # the import attempt, once: not a cache of data
def _api() -> Any:
    try:
        from opentelemetry import trace
    except ImportError:  # the otel extra is optional
        return None
    return trace


def enabled() -> bool:
    return _api() is not None


def current_span() -> Any:
    """The span current in this context (the request's), or None; None too while no SDK is set up,
    since the turn's own span would then be a no-op whatever its parent."""
    trace = _configured()
    if trace is None:
        return None
    current = trace.get_current_span()
    return current if current.get_span_context().is_valid else None


def _configured() -> Any:
    """The `opentelemetry.trace` module when an SDK tracer provider is set, else None."""
    trace = _api()
    if trace is None or isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        return None
    return trace


def start_span(
    name: str, *, parent: Any = None, client: bool = False, attributes: Mapping[str, Any] | None = None
) -> Any:
    """A started span (end it yourself), child of `parent` when given, else of the current span."""
    if parent is NO_SPAN:
        return NO_SPAN  # the child of an untraced turn (decided once, when the turn starts)
    trace = _configured()
    if trace is None:
        return NO_SPAN  # no SDK configured (yet): every span would be a no-op, skip making them
    context = trace.set_span_in_context(parent) if parent is not None else None
    kind = trace.SpanKind.CLIENT if client else trace.SpanKind.INTERNAL
    return _tracer().start_span(name, context=context, kind=kind, attributes=_clean(attributes or {}))


@functools.cache  # one tracer object, not a cache of data
def _tracer() -> Any:
    """One tracer: a proxy that follows the SDK provider a site sets later (get_tracer reads the
    environment on every call, a cost per span otherwise)."""
    return _api().get_tracer("memproc")


@contextmanager
def span(
    name: str, *, parent: Any = None, client: bool = False, attributes: Mapping[str, Any] | None = None
) -> Iterator[Any]:
    """A span around a block; an exception leaving the block marks it as an error."""
    current = start_span(name, parent=parent, client=client, attributes=attributes)
    try:
        yield current
    except BaseException as exc:
        fail(current, exc)
        raise
    finally:
        current.end()


def fail(current: Any, exc: BaseException) -> None:
    """Marks a span as failed by `exc` (its class as `error.type`, per the semantic conventions). The
    exception event carries the masked text and a traceback without any exception's own text
    (`memproc.redaction`), which override what the SDK would take from `exc` itself."""
    trace = _api()
    if trace is None or current is NO_SPAN:
        return
    current.set_attribute("error.type", type(exc).__qualname__)
    current.record_exception(
        exc,
        attributes={
            "exception.message": redaction.message(exc),
            "exception.stacktrace": redaction.traceback_text(exc),
        },
    )
    current.set_status(trace.Status(trace.StatusCode.ERROR, type(exc).__qualname__))


def _clean(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """OpenTelemetry takes str, bool, int, float or sequences of one of them; None means absent."""
    clean: dict[str, Any] = {}
    for key, value in attributes.items():
        if value is None:
            continue
        if isinstance(value, (str, bool, int, float)):
            clean[key] = value
        elif isinstance(value, (list, tuple)):
            clean[key] = [v if isinstance(v, (str, bool, int, float)) else str(v) for v in value]
        else:
            clean[key] = str(value)
    return clean
