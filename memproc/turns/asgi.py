"""The HTTP driver: how a view runs a turn, in the request's thread under WSGI and without blocking
under ASGI.

Under ASGI the turn runs in the request's thread only up to its first model call (reads, input
processors, an input tripwire: their errors are ordinary responses), the thread's database
connection is released, and the rest runs on the event loop (`memproc.turns.aio`): the stream is an
async iterator, so Django sends each frame as it is made, and a client that goes away cancels the
turn before it saves. Encoding the events (SSE, the OpenAI and AI SDK protocols) is the API's.

The views hand over the agent they resolved; the driver asks it for the call's TurnPlan
(`Planner.plan`) and runs the turn on that.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

from asgiref.sync import async_to_sync
from django.core.handlers.asgi import ASGIRequest
from django.db import connections

from memproc.admission import admission_release
from memproc.events import GenerateResult, StreamEvent
from memproc.turns.aio import turn_continue_async
from memproc.turns.plan import Planner, TurnPlan
from memproc.turns.resume import Resumption, resumed_input
from memproc.turns.sync import turn_begin, turn_run
from memproc.turns.sync import turn_events as turn_events_sync

__all__ = ["is_asgi", "primed", "turn_events", "turn_generate", "turn_resume_events"]


def is_asgi(request: Any) -> bool:
    return isinstance(getattr(request, "_request", request), ASGIRequest)


def release_connections() -> None:
    """The request thread's connections, closed before the turn waits for its model."""
    for connection in connections.all(initialized_only=True):
        if not connection.in_atomic_block:
            connection.close()
    admission_release()


def turn_generate(request: Any, agent: Planner, messages: Any, **options: Any) -> GenerateResult:
    plan = _plan(agent, options)
    if not is_asgi(request):
        return turn_run(plan, messages, **options)
    started = turn_begin(plan, messages, **options)
    release_connections()
    return async_to_sync(_finish)(started)


async def _finish(started: Any) -> GenerateResult:
    box: list[GenerateResult] = []
    async for _ in turn_continue_async(started, result_box=box):
        pass
    return box[0]


def turn_events(
    request: Any,
    agent: Planner,
    messages: Any,
    *,
    result_box: list[GenerateResult] | None = None,
    **options: Any,
) -> Iterator[StreamEvent] | AsyncIterator[StreamEvent]:
    """A streamed turn: under WSGI a sync iterator already run to its first event (an error before it
    answers a normal status); under ASGI an async iterator whose turn ran here up to its first model
    call, with the connection released before that call.

    Under ASGI a client that goes away cancels the turn, possibly while it saves; `result_box` then
    still gets the result of a turn that saved. (Under WSGI the stream is closed only at an event,
    and the terminal event comes right after the save.)"""
    plan = _plan(agent, options)
    if not is_asgi(request):
        return primed(turn_events_sync(plan, messages, streaming=True, **options))
    started = turn_begin(plan, messages, streaming=True, **options)
    release_connections()
    return turn_continue_async(started, result_box=result_box)


def turn_resume_events(
    request: Any, agent: Planner, pending: Any, **options: Any
) -> Iterator[StreamEvent] | AsyncIterator[StreamEvent]:
    """The suspended turn of a decided PendingToolCall, resumed and streamed for the request, as
    `turn_events` streams a new one (memproc.turns.sync.turn_resume runs one to its end instead). The
    decision is the caller's (memproc.services.approvals), made once before this is called."""
    return turn_events(
        request,
        agent,
        resumed_input(pending),
        thread_id=pending.thread_id or None,
        resource_id=pending.resource_id or None,
        memory_options=pending.turn.get("memory_options") or None,
        resume=Resumption.of(pending),
        **options,
    )


def _plan(agent: Planner, options: dict[str, Any]) -> TurnPlan:
    """The call's plan; takes the per-call overrides out of `options`, leaving the engine's."""
    return agent.plan(
        memory_options=options.pop("memory_options", None),
        max_processor_retries=options.pop("max_processor_retries", None),
        stream_policy=options.pop("stream_policy", None),
    )


def primed(events: Iterator[StreamEvent]) -> Iterator[StreamEvent]:
    """Runs the turn up to its first event now, so an error before any event (a model that is down, a
    refused file) answers a normal status instead of a 200 stream."""
    first = next(events, None)
    return _prepend(first, events) if first is not None else iter(())


def _prepend(first: StreamEvent, rest: Iterator[StreamEvent]) -> Iterator[StreamEvent]:
    try:
        yield first
        yield from rest
    finally:
        close = getattr(rest, "close", None)
        if close is not None:
            close()
