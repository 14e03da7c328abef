"""The turn a log line belongs to: agent, thread, resource and turn id on every record.

A running turn binds its identity in a context variable (worker threads of async turns inherit
it). memproc's own log calls pass it as `extra=`; `TurnContextFilter` adds it to every record
emitted during a turn, third-party ones included (the OpenAI SDK's retries, database errors):

    LOGGING = {
        "version": 1,
        "filters": {"memproc_turn": {"()": "memproc.logs.TurnContextFilter"}},
        "handlers": {"console": {"class": "logging.StreamHandler", "filters": ["memproc_turn"]}},
        ...
    }

A JSON formatter (python-json-logger) or structlog's `ProcessorFormatter` then sees `agent_id`,
`thread_id`, `resource_id` and `turn_id` as fields; outside a turn they are "".

`failure()` logs a failed step the way `logger.exception` would, but with the traceback rendered by
`memproc.redaction` (class, masked text and frames of each exception in the chain) and no exception
object on the record (a configuration error or a back end that is down gets its cause on the line
and no traceback): a provider's error may quote the API key or the user's text, and a handler
reading `exc_info` (Sentry's keeps frame locals) would send it on.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token
from typing import Any

from memproc import redaction

__all__ = ["FIELDS", "TurnContextFilter", "bind", "bound", "current", "failure", "lent", "rebind", "unbind"]

FIELDS = ("agent_id", "thread_id", "resource_id", "turn_id")
_EMPTY: dict[str, str] = dict.fromkeys(FIELDS, "")
_turn: ContextVar[dict[str, str] | None] = ContextVar("memproc_turn", default=None)


def bind(*, agent_id: str, thread_id: str | None, resource_id: str | None, turn_id: Any) -> Token[Any]:
    return _turn.set(
        {
            "agent_id": agent_id,
            "thread_id": thread_id or "",
            "resource_id": resource_id or "",
            "turn_id": str(turn_id),
        }
    )


def rebind(*, thread_id: str | None, resource_id: str | None) -> None:
    """Completes a binding once the turn knows its thread (a new thread's id, a resource read from
    the thread). The bound fields are one dict shared by every context copied from the binding one
    (worker threads of an async turn), so they all see the change."""
    fields = _turn.get()
    if fields is None:
        return
    fields["thread_id"] = thread_id or ""
    fields["resource_id"] = resource_id or ""


def unbind(token: Token[Any]) -> None:
    """Forgets the binding; a turn continued elsewhere (begun in a request thread, finished on the
    event loop) cannot reset a token of another context, so it clears its own instead."""
    try:
        _turn.reset(token)
    except ValueError:
        _turn.set(None)


def bound() -> dict[str, str] | None:
    """The binding in force here (None outside a turn), for `lent`."""
    return _turn.get()


@contextmanager
def lent(outer: dict[str, str] | None) -> Iterator[None]:
    """A generator-driven turn runs in its caller's context: while its driver hands an event to the
    caller, the caller's own binding (`outer`) is in force, so a stream the caller drops unread
    does not leave the turn's fields on the caller's later log lines."""
    inner = _turn.get()
    _turn.set(outer)
    try:
        yield
    finally:
        _turn.set(inner)


def current() -> dict[str, str]:
    """The running turn's fields (a copy, for `extra=`), or empty strings outside a turn."""
    return dict(_turn.get() or _EMPTY)


def failure(
    logger: logging.Logger,
    msg: str,
    *args: Any,
    exc: BaseException,
    level: int = logging.ERROR,
    extra: dict[str, Any] | None = None,
) -> None:
    """`logger.exception(msg, *args)` for `exc`, with its traceback masked (`exc_text`, which
    formatters print where they would print `exc_info`; `exc_info` stays None)."""
    if not logger.isEnabledFor(level):
        return
    filename, line, function, _ = logger.findCaller(stacklevel=2)
    known = _known_cause(exc)
    if known:
        # A missing key or a back end that is down: the cause is the whole story, and a traceback on
        # every turn would bury it.
        msg, args = f"{msg} (%s)", (*args, redaction.describe(exc))
    record = logger.makeRecord(logger.name, level, filename, line, msg, args, None, function, extra)
    if not known:
        record.exc_text = redaction.traceback_text(exc)
    logger.handle(record)


def _known_cause(exc: BaseException) -> bool:
    """A failure whose message says all an operator needs: configuration, or a back end that is down."""
    from memproc.exceptions import ConfigurationError, EmbedderUnavailable

    return isinstance(exc, ConfigurationError | EmbedderUnavailable)


class TurnContextFilter(logging.Filter):
    """Adds the running turn's fields to each record that does not carry them already."""

    def filter(self, record: logging.LogRecord) -> bool:
        fields = _turn.get() or _EMPTY
        for name in FIELDS:
            if not hasattr(record, name):
                setattr(record, name, fields[name])
        return True
