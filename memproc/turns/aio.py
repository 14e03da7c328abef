"""The async driver of a turn: the model is awaited natively, blocking steps run in worker threads.

Concurrent `Agent.agenerate` / `astream` calls overlap: a turn that waits for its model holds no
thread and no database connection. Each blocking step (the turn's reads, a tool, a hook chain, the
atomic save) runs in memproc's thread pool and closes its database connection afterwards the way
Django does after a request (`close_old_connections`: kept when CONN_MAX_AGE allows). A model with
`agenerate` / `astream` is awaited; a sync-only one runs in the pool. Cancelling the task (a client
that went away) stops the turn before it saves; that is logged at INFO, not as an error.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

from django.db import close_old_connections

from memproc import logs
from memproc.conf import settings
from memproc.events import GenerateResult, StreamEvent
from memproc.messages import MessageInput
from memproc.turns.effects import (
    Blocking,
    Effect,
    ModelGenerate,
    ModelStreamClose,
    ModelStreamNext,
    ModelStreamOpen,
)
from memproc.turns.engine import TurnEngine
from memproc.turns.plan import TurnPlan
from memproc.turns.sync import StartedTurn

__all__ = ["in_thread", "turn_continue_async", "turn_events_async"]

logger = logging.getLogger(__name__)

_executor: ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()


def executor() -> ThreadPoolExecutor:
    """memproc's worker threads (ASYNC_THREADS of them), built on first use."""
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(
                max_workers=int(settings.ASYNC_THREADS), thread_name_prefix="memproc-turn"
            )
        return _executor


async def in_thread(fn: Callable[..., Any], *args: Any) -> Any:
    """Runs a blocking call in a worker thread, with this task's context variables; the thread's
    database connection is closed afterwards unless CONN_MAX_AGE keeps it.

    A thread cannot be stopped: when the awaiting task is cancelled, the cancellation waits for the
    call to end, so that what it did (a turn's save) is known before the caller goes on."""
    loop = asyncio.get_running_loop()
    context = contextvars.copy_context()
    done = loop.run_in_executor(executor(), partial(context.run, _with_connection_cleanup, fn, *args))
    try:
        return await asyncio.shield(done)
    except asyncio.CancelledError:
        await asyncio.wait([done])
        raise


def _with_connection_cleanup(fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    finally:
        close_old_connections()


async def turn_events_async(
    plan: TurnPlan,
    messages: MessageInput,
    *,
    result_box: list[GenerateResult] | None = None,
    **options: Any,
) -> AsyncIterator[StreamEvent]:
    """Yields the turn's stream events; the turn's result is appended to `result_box` when given.
    `options` are TurnEngine's, as for the sync driver."""
    engine = TurnEngine(plan, messages, **options)
    started = StartedTurn(engine, engine.run(), [], None, None)
    async for event in turn_continue_async(started, result_box=result_box):
        yield event


async def turn_continue_async(
    started: StartedTurn, *, result_box: list[GenerateResult] | None = None
) -> AsyncIterator[StreamEvent]:
    """Continues a turn (from its start, or from `turn_begin`'s first model call) without blocking."""
    engine, steps = started.engine, started.steps
    streams: list[Any] = []
    finished = started.result is not None
    try:
        for event in started.events:
            yield event
        if started.result is not None:
            if result_box is not None:
                result_box.append(started.result)
            return
        send: Any = None
        error: BaseException | None = None
        if started.pending is not None:
            try:
                send = await _perform(started.pending, streams)
            except Exception as exc:
                error = exc
        while True:
            try:
                item = steps.throw(error) if error is not None else steps.send(send)
            except StopIteration as stop:
                finished = True
                if result_box is not None:
                    result_box.append(stop.value)
                return
            send, error = None, None
            if isinstance(item, StreamEvent):
                yield item
                continue
            try:
                send = await _perform(item, streams)
            except Exception as exc:
                error = exc
    except (asyncio.CancelledError, GeneratorExit):
        if engine.saved:
            # The caller went away after the save (or after the terminal event): the turn stands.
            if not finished and result_box is not None and engine.result is not None:
                result_box.append(engine.result)
        elif not finished:
            logger.info(
                "memproc: turn of agent %s cancelled (the caller went away); nothing saved",
                engine.plan.agent_id,
                extra=logs.current(),
            )
        raise
    finally:
        steps.close()
        for handle in reversed(streams):
            await _close_stream(handle)
        if engine.turn is not None and engine.turn.attachments:  # no thread hop when nothing to delete
            await in_thread(engine.cleanup)


async def _perform(effect: Effect, streams: list[Any]) -> Any:
    if isinstance(effect, Blocking):
        return await in_thread(effect.fn, *effect.args)
    if isinstance(effect, ModelGenerate):
        model = effect.model
        if callable(getattr(model, "agenerate", None)):
            return await model.agenerate(effect.request)
        return await in_thread(model.generate, effect.request)
    if isinstance(effect, ModelStreamOpen):
        model = effect.model
        if callable(getattr(model, "astream", None)):
            handle: Any = aiter(model.astream(effect.request))
        elif callable(getattr(model, "stream", None)):
            handle = _ThreadedIterator(model, effect.request)
        else:
            raise TypeError(f"{model!r} cannot stream")
        streams.append(handle)
        return handle
    if isinstance(effect, ModelStreamNext):
        handle = effect.handle
        if isinstance(handle, _ThreadedIterator):
            return await handle.next()
        return await anext(handle, None)
    assert isinstance(effect, ModelStreamClose)
    if effect.handle in streams:
        streams.remove(effect.handle)
    await _close_stream(effect.handle)
    return None


async def _close_stream(handle: Any) -> None:
    if isinstance(handle, _ThreadedIterator):
        await in_thread(handle.close)
        return
    aclose = getattr(handle, "aclose", None)
    if aclose is not None:
        await aclose()


class _ThreadedIterator:
    """A sync-only model's stream, advanced in worker threads (one step at a time)."""

    def __init__(self, model: Any, request: Any) -> None:
        self.model = model
        self.request = request
        self.iterator: Any = None

    def _next(self) -> Any:
        if self.iterator is None:
            self.iterator = iter(self.model.stream(self.request))
        return next(self.iterator, None)

    async def next(self) -> Any:
        return await in_thread(self._next)

    def close(self) -> None:
        close = getattr(self.iterator, "close", None)
        if close is not None:
            close()
