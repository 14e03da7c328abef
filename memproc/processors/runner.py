"""The processor runner: calls hooks in order, enforces the return contract, turns aborts into tripwires."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from asgiref.sync import async_to_sync

from memproc.events import Phase, StreamEvent, Tripwire
from memproc.exceptions import TripWire
from memproc.messages import Message
from memproc.processors.base import ProcessorContext, processor_id

if TYPE_CHECKING:
    from memproc.services.turns import Turn

logger = logging.getLogger(__name__)


class Blocked(Exception):
    """A processor aborted the turn; carries the Tripwire the result reports."""

    def __init__(self, tripwire: Tripwire) -> None:
        super().__init__(tripwire.reason)
        self.tripwire = tripwire


def build_chains(
    *,
    memory_input: Sequence[Any],
    memory_output: Sequence[Any],
    user_input: Sequence[Any],
    user_output: Sequence[Any],
) -> tuple[list[Any], list[Any]]:
    """Rules 1-3: memory first on input and last on output; a memory processor the user placed in a
    direction replaces the automatic one in that direction only."""
    user_in_ids = {processor_id(p) for p in user_input}
    user_out_ids = {processor_id(p) for p in user_output}
    chain_in = [p for p in memory_input if processor_id(p) not in user_in_ids] + list(user_input)
    chain_out = list(user_output) + [p for p in memory_output if processor_id(p) not in user_out_ids]
    return chain_in, chain_out


def call_hook(hook: Callable[..., Any], *args: Any) -> Any:
    """Calls a sync or async hook from sync code (the turn runs sync; agenerate runs it in a thread)."""
    if inspect.iscoroutinefunction(hook):
        return async_to_sync(hook)(*args)
    result = hook(*args)
    if inspect.isawaitable(result):

        async def _await() -> Any:
            return await result

        return async_to_sync(_await)()
    return result


class ProcessorRunner:
    """Runs chains for one turn. Each processor keeps one `state` dict across the turn's phases."""

    def __init__(self, turn: Turn) -> None:
        self.turn = turn
        self._states: dict[int, dict[str, Any]] = {}

    def context(
        self, processor: Any, *, phase: str, messages: Sequence[Message], system_messages: Sequence[Message]
    ) -> ProcessorContext:
        turn = self.turn
        return ProcessorContext(
            processor_id=processor_id(processor),
            messages=tuple(messages),
            system_messages=tuple(system_messages),
            phase=phase,
            thread_id=turn.thread_id,
            resource_id=turn.resource_id,
            agent=turn.agent,
            store=turn.store,
            state=self._states.setdefault(id(processor), {}),
            loaded_ids=frozenset(turn.loaded_ids),
            turn=turn,
        )

    def run_messages(
        self,
        chain: Sequence[Any],
        *,
        hook_name: str,
        phase: Phase,
        messages: list[Message],
        system_messages: list[Message],
    ) -> tuple[list[Message], list[Message]]:
        """Runs `hook_name` of each processor that has it. System messages a processor returns join
        `system_messages` (same id: replaced); the rest become the new message list."""
        for processor in chain:
            hook = getattr(processor, hook_name, None)
            if hook is None:
                continue
            ctx = self.context(processor, phase=phase, messages=messages, system_messages=system_messages)
            try:
                result = call_hook(hook, ctx)
            except TripWire as exc:
                raise Blocked(_tripwire(exc, processor, phase)) from exc
            if result is None:
                continue
            messages, system_messages = _split(result, processor, system_messages)
        return messages, system_messages

    def run_stream_part(
        self, chain: Sequence[Any], part: StreamEvent, system_messages: Sequence[Message]
    ) -> list[StreamEvent]:
        """The parts to emit for one model event. A hook returns the part, a changed part, None (drop
        it) or a list of parts (a buffering processor flushing held text before a `finish`); later
        processors see each returned part in order. Rule 7: an error in a stream hook is logged and
        the part passes unchanged."""
        parts = [part]
        for processor in chain:
            hook = getattr(processor, "process_output_stream", None)
            if hook is None:
                continue
            out: list[StreamEvent] = []
            for current in parts:
                ctx = self.context(processor, phase="stream", messages=(), system_messages=system_messages)
                try:
                    changed = call_hook(hook, ctx, current)
                except TripWire as exc:
                    raise Blocked(_tripwire(exc, processor, "stream")) from exc
                except Exception:
                    logger.exception(
                        "memproc: stream processor %s failed; part passed unchanged", processor_id(processor)
                    )
                    out.append(current)
                    continue
                out.extend(_stream_parts(changed, processor, current))
            parts = out
            if not parts:
                break
        return parts


def _stream_parts(changed: Any, processor: Any, original: StreamEvent) -> list[StreamEvent]:
    if changed is None:
        return []
    if isinstance(changed, StreamEvent):
        return [changed]
    if isinstance(changed, (list, tuple)) and all(isinstance(p, StreamEvent) for p in changed):
        return list(changed)
    logger.error(
        "memproc: stream processor %s returned %r, not a StreamEvent or a list of them; ignored",
        processor_id(processor),
        type(changed).__name__,
    )
    return [original]


def _tripwire(exc: TripWire, processor: Any, phase: Phase) -> Tripwire:
    pid = exc.processor_id or processor_id(processor)
    return Tripwire(
        reason=exc.reason or f"Tripwire triggered by {pid}",
        processor_id=pid,
        phase=phase,
        retry=exc.retry,
        metadata=dict(exc.metadata),
    )


def _split(
    result: Any, processor: Any, system_messages: list[Message]
) -> tuple[list[Message], list[Message]]:
    if isinstance(result, (str, bytes)) or not isinstance(result, Sequence):
        raise TypeError(
            f"Processor {processor_id(processor)!r} returned {type(result).__name__}; "
            "expected a list of Message or None"
        )
    messages: list[Message] = []
    system = list(system_messages)
    for item in result:
        if not isinstance(item, Message):
            raise TypeError(f"Processor {processor_id(processor)!r} returned a non-Message item: {item!r}")
        if item.role == "system":
            ids = [s.id for s in system]
            if item.id in ids:
                system[ids.index(item.id)] = item
            else:
                system.append(item)
        else:
            messages.append(item)
    return messages, system
