"""The sync driver of a turn: every effect performed in the calling thread.

`turn_events` drives a whole turn for `Agent.stream` (`turn_run` for `generate`); `turn_begin` drives
one up to its first model call, so that an HTTP view sees errors before it (bad input, a refused
file, a blocked input) at once, and memproc.turns.aio continues it without blocking. Each takes the
agent's TurnPlan for the call (memproc.turns.plan).
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

from asgiref.sync import async_to_sync

from memproc import logs
from memproc.events import GenerateResult, StreamEvent
from memproc.messages import MessageInput
from memproc.turns.effects import (
    Blocking,
    Effect,
    EngineStep,
    ModelGenerate,
    ModelStreamClose,
    ModelStreamNext,
    ModelStreamOpen,
)
from memproc.turns.engine import TurnEngine
from memproc.turns.plan import TurnPlan
from memproc.turns.resume import Resumption, resumed_input

__all__ = ["OpenStreams", "StartedTurn", "perform", "turn_begin", "turn_events", "turn_resume", "turn_run"]


def turn_run(plan: TurnPlan, messages: MessageInput, **options: Any) -> GenerateResult:
    """A whole turn in this thread, its stream events dropped: the turn's result."""
    events = turn_events(plan, messages, **options)
    while True:
        try:
            next(events)
        except StopIteration as stop:
            return stop.value


def turn_resume(plan: TurnPlan, pending: Any) -> GenerateResult:
    """The suspended turn of a decided PendingToolCall, resumed and run to its end (or its next
    waiting call) in this thread: its result (memproc.turns.resume)."""
    return turn_run(
        plan,
        resumed_input(pending),
        thread_id=pending.thread_id or None,
        resource_id=pending.resource_id or None,
        resume=Resumption.of(pending),
    )


def turn_events(
    plan: TurnPlan, messages: MessageInput, **options: Any
) -> Generator[StreamEvent, None, GenerateResult]:
    """The sync driver: performs each effect in this thread, yields the stream events, returns the
    result. Closing it (a client that went away) stops the turn before it saves. `options` are
    TurnEngine's (thread_id, resource_id, streaming, replace_from)."""
    engine = TurnEngine(plan, messages, **options)
    steps = engine.run()
    streams = OpenStreams()
    try:
        return (yield from _drive(steps, streams))
    finally:
        steps.close()
        streams.close_all()
        engine.cleanup()


def _drive(
    steps: EngineStep, streams: OpenStreams, *, until_model: bool = False
) -> Generator[StreamEvent, None, Any]:
    """Performs effects in this thread. With `until_model`, stops before the first model effect and
    returns it (unperformed) instead of the turn's result."""
    send: Any = None
    error: BaseException | None = None
    outer = logs.bound()
    while True:
        try:
            item = steps.throw(error) if error is not None else steps.send(send)
        except StopIteration as stop:
            return stop.value
        send, error = None, None
        if isinstance(item, StreamEvent):
            with logs.lent(outer):
                yield item
            continue
        if until_model and isinstance(item, ModelGenerate | ModelStreamOpen):
            return PendingModel(item)
        try:
            send = streams.track(item, perform(item))
        except Exception as exc:
            error = exc


@dataclass(frozen=True, slots=True)
class PendingModel:
    effect: ModelGenerate | ModelStreamOpen


@dataclass
class StartedTurn:
    """A turn run in the calling thread up to its first model call (its reads, input processors and
    any input tripwire done); `memproc.turns.aio` continues it without blocking."""

    engine: TurnEngine
    steps: EngineStep
    events: list[StreamEvent]
    pending: ModelGenerate | ModelStreamOpen | None
    result: GenerateResult | None

    def close(self) -> None:
        """Drops a started turn that will not be continued (nothing was saved)."""
        self.steps.close()
        self.engine.cleanup()


def turn_begin(plan: TurnPlan, messages: MessageInput, **options: Any) -> StartedTurn:
    """Runs a turn up to its first model call here, so errors before it (bad input, a refused file, a
    blocked input) surface to the caller now, the way an HTTP view wants them."""
    engine = TurnEngine(plan, messages, **options)
    steps = engine.run()
    streams = OpenStreams()
    events: list[StreamEvent] = []
    try:
        driver = _drive(steps, streams, until_model=True)
        while True:
            try:
                events.append(next(driver))
            except StopIteration as stop:
                outcome = stop.value
                break
    except BaseException:
        steps.close()
        engine.cleanup()
        raise
    if isinstance(outcome, PendingModel):
        return StartedTurn(engine, steps, events, outcome.effect, None)
    return StartedTurn(engine, steps, events, None, outcome)


class OpenStreams:
    """The model streams a driver opened and has not closed: a turn stopped midway (a client that
    went away) leaves them to the driver."""

    def __init__(self) -> None:
        self.handles: list[Any] = []

    def track(self, effect: Effect, result: Any) -> Any:
        if isinstance(effect, ModelStreamOpen):
            self.handles.append(result)
        elif isinstance(effect, ModelStreamClose) and effect.handle in self.handles:
            self.handles.remove(effect.handle)
        return result

    def close_all(self) -> None:
        while self.handles:
            perform(ModelStreamClose(self.handles.pop()))


def perform(effect: Effect) -> Any:
    """An effect, performed in the calling thread. An async-only model is driven with async_to_sync."""
    if isinstance(effect, Blocking):
        return effect.fn(*effect.args)
    model = getattr(effect, "model", None)
    if isinstance(effect, ModelGenerate):
        if hasattr(model, "generate"):
            return model.generate(effect.request)
        return async_to_sync(model.agenerate)(effect.request)
    if isinstance(effect, ModelStreamOpen):
        if hasattr(model, "stream"):
            return iter(model.stream(effect.request))
        return _SyncOverAsync(model.astream(effect.request))
    if isinstance(effect, ModelStreamNext):
        return next(effect.handle, None)
    close = getattr(effect.handle, "close", None)
    return close() if close is not None else None


class _SyncOverAsync:
    """Iterates an async iterator from sync code, one `async_to_sync` call per item."""

    def __init__(self, iterator: Any) -> None:
        self.iterator = iterator

    def __iter__(self) -> _SyncOverAsync:
        return self

    def __next__(self) -> Any:
        try:
            return async_to_sync(self.iterator.__anext__)()
        except StopAsyncIteration:
            raise StopIteration from None

    def close(self) -> None:
        aclose = getattr(self.iterator, "aclose", None)
        if aclose is not None:
            async_to_sync(aclose)()
