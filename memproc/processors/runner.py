"""The processor runner: calls hooks in order, enforces the return contract, turns aborts into tripwires.

It owns no messages: the turn's `Conversation` does. Each list hook's result goes through it, so a
processor can return any list and the next one (and the model) still sees a valid conversation.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from memproc import logs, telemetry
from memproc.events import StreamEvent, Tripwire
from memproc.exceptions import TripWire
from memproc.llm.types import ModelRequest, ToolCall
from memproc.messages import Message, ToolResultPart
from memproc.processors.base import HOOKS, ProcessorContext, processor_id
from memproc.processors.conversation import Conversation, merge_result, unique_by_id
from memproc.processors.hooks import call_hook
from memproc.processors.parallel import with_hook
from memproc.processors.turn import Turn
from memproc.tools import Tool

logger = logging.getLogger(__name__)

__all__ = ["Blocked", "ProcessorRunner", "StepView", "build_chains", "call_hook"]


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


class StepView:
    """What one model call will see after the `process_input_step` hooks."""

    def __init__(self, system: list[Message], messages: list[Message], tools: list[Tool]) -> None:
        self.system = system
        self.messages = messages
        self.tools = tools


class ProcessorRunner:
    """Runs the chains of one turn. Each processor keeps one `state` dict across the turn's hooks."""

    def __init__(self, turn: Turn, conversation: Conversation) -> None:
        self.turn = turn
        self.conversation = conversation
        self._states: dict[int, dict[str, Any]] = {}

    def context(
        self, processor: Any, *, hook: str, messages: Sequence[Message], **extra: Any
    ) -> ProcessorContext:
        turn = self.turn
        extra.setdefault("system_messages", tuple(self.conversation.system))
        extra.setdefault("tools", list(turn.tools.values()))
        return ProcessorContext(
            processor_id=processor_id(processor),
            messages=tuple(messages),
            phase=HOOKS[hook],
            thread_id=turn.thread_id,
            resource_id=turn.resource_id,
            agent=turn.agent,
            store=turn.store,
            state=self._states.setdefault(id(processor), {}),
            loaded_ids=frozenset(turn.loaded_ids),
            input_messages=tuple(self.conversation.new_input),
            turn=turn,
            **extra,
        )

    def _call(self, processor: Any, hook_name: str, ctx: ProcessorContext, *args: Any) -> Any:
        """One hook call: timed for the turn record, traced as a span (stream parts: timed only)."""
        pid = ctx.processor_id
        # An untraced turn's hooks are untraced too: skip building a span's name and attributes.
        traced = hook_name != "process_output_stream" and self.turn.trace is not telemetry.NO_SPAN
        current = (
            telemetry.start_span(
                f"memproc.processor {pid} {hook_name}",
                parent=self.turn.trace,
                attributes={
                    "memproc.processor.id": pid,
                    "memproc.processor.hook": hook_name,
                    "memproc.step": ctx.step,
                },
            )
            if traced
            else telemetry.NO_SPAN
        )
        ctx.span = current
        start = time.perf_counter()
        try:
            return call_hook(getattr(processor, hook_name), ctx, *args)
        except TripWire as exc:
            tripwire = _tripwire(exc, processor, HOOKS[hook_name])
            current.set_attributes(
                {
                    "memproc.tripwire.reason": tripwire.reason,
                    "memproc.tripwire.phase": tripwire.phase,
                    "memproc.tripwire.retry": tripwire.retry,
                }
            )
            raise Blocked(tripwire) from exc
        except BaseException as exc:
            telemetry.fail(current, exc)
            raise
        finally:
            self._timed(pid, hook_name, (time.perf_counter() - start) * 1000)
            current.end()

    def _timed(self, pid: str, hook_name: str, ms: float) -> None:
        """Adds up each processor hook's time over the turn (steps and stream parts included)."""
        self.turn.info.time(pid, hook_name, ms)

    # --- once per turn -------------------------------------------------------------------------

    def run_input(self, chain: Sequence[Any]) -> None:
        """`process_input` of each processor; each result goes through the conversation."""
        for processor in _with_hook(chain, "process_input"):
            ctx = self.context(processor, hook="process_input", messages=self.conversation.messages)
            result = self._call(processor, "process_input", ctx)
            if result is not None:
                self.conversation.apply(_checked_list(result, processor))

    def run_output(self, chain: Sequence[Any], responses: list[Message]) -> list[Message]:
        """`process_output_result`: each hook sees the responses (input in `ctx.input_messages`)."""
        for processor in _with_hook(chain, "process_output_result"):
            ctx = self.context(processor, hook="process_output_result", messages=responses)
            result = self._call(processor, "process_output_result", ctx)
            if result is not None:
                responses = _responses(_checked_list(result, processor))
        return responses

    # --- every model call ----------------------------------------------------------------------

    def run_input_step(self, chain: Sequence[Any], *, step: int, responses: list[Message]) -> StepView:
        """`process_input_step` before model call `step`: changes what this call sees, not what is
        saved. A hook may return a list, and may assign `ctx.system_messages` / `ctx.tools`."""
        view = StepView(
            list(self.conversation.system),
            [*self.conversation.messages, *responses],
            list(self.turn.tools.values()),
        )
        for processor in _with_hook(chain, "process_input_step"):
            ctx = self.context(
                processor,
                hook="process_input_step",
                messages=view.messages,
                system_messages=tuple(view.system),
                tools=list(view.tools),
                step=step,
            )
            result = self._call(processor, "process_input_step", ctx)
            view.system, view.tools = list(ctx.system_messages), _checked_tools(ctx.tools, processor)
            if result is not None:
                view.system, view.messages = merge_result(
                    _checked_list(result, processor), view.system, loaded_ids=self.turn.loaded_ids
                )
        return view

    def run_output_step(
        self, chain: Sequence[Any], *, step: int, responses: list[Message], tool_calls: Sequence[ToolCall]
    ) -> list[Message]:
        """`process_output_step` after model call `step`, before its tools run: `responses` ends with
        this step's assistant message; a returned list without one of its calls vetoes that call."""
        for processor in _with_hook(chain, "process_output_step"):
            ctx = self.context(
                processor,
                hook="process_output_step",
                messages=responses,
                step=step,
                tool_calls=tuple(tool_calls),
            )
            result = self._call(processor, "process_output_step", ctx)
            if result is not None:
                responses = _responses(_checked_list(result, processor))
        return responses

    def run_tool_result(
        self, chain: Sequence[Any], *, step: int, responses: list[Message], result: ToolResultPart
    ) -> ToolResultPart:
        """`process_tool_result` after a tool ran, before the model reads the result."""
        for processor in _with_hook(chain, "process_tool_result"):
            ctx = self.context(processor, hook="process_tool_result", messages=responses, step=step)
            changed = self._call(processor, "process_tool_result", ctx, result)
            if changed is None:
                continue
            if not isinstance(changed, ToolResultPart) or changed.tool_call_id != result.tool_call_id:
                raise TypeError(
                    f"Processor {processor_id(processor)!r} must return a ToolResultPart for call "
                    f"{result.tool_call_id!r} (or None), not {changed!r}"
                )
            result = changed
        return result

    def run_api_error(
        self, chain: Sequence[Any], *, step: int, request: ModelRequest, error: Exception
    ) -> ModelRequest | None:
        """`process_api_error` after model call `step` failed with `error`: each hook sees the request
        as the hooks before it left it (`ctx.request`; `ctx.messages` its non-system messages). A
        returned request asks for a retry with it; None from all of them lets the error stand."""
        retry: ModelRequest | None = None
        for processor in _with_hook(chain, "process_api_error"):
            current = retry or request
            ctx = self.context(
                processor,
                hook="process_api_error",
                messages=[m for m in current.messages if m.role != "system"],
                system_messages=tuple(m for m in current.messages if m.role == "system"),
                step=step,
                request=current,
            )
            try:
                changed = self._call(processor, "process_api_error", ctx, error)
            except Blocked as blocked:
                raise TypeError(
                    f"Processor {processor_id(processor)!r} aborted in process_api_error, which cannot "
                    "block a turn: return None to let the error stand"
                ) from blocked
            if changed is None:
                continue
            if not isinstance(changed, ModelRequest):
                raise TypeError(
                    f"Processor {processor_id(processor)!r} must return a ModelRequest from "
                    f"process_api_error (or None), not {changed!r}"
                )
            retry = changed
        return retry

    def run_stream_part(self, chain: Sequence[Any], part: StreamEvent) -> list[StreamEvent]:
        """The parts to emit for one model event. A hook returns the part, a changed part, None (drop
        it) or a list of parts (a buffering processor flushing held text before a `finish`); later
        processors see each returned part in order. Rule 7: an error in a stream hook is logged and
        the part passes unchanged."""
        parts = [part]
        for processor in _with_hook(chain, "process_output_stream"):
            out: list[StreamEvent] = []
            for current in parts:
                ctx = self.context(processor, hook="process_output_stream", messages=())
                try:
                    changed = self._call(processor, "process_output_stream", ctx, current)
                except Blocked:
                    raise
                except Exception as exc:
                    logs.failure(
                        logger,
                        "memproc: stream processor %s failed; part passed unchanged",
                        processor_id(processor),
                        exc=exc,
                        extra=logs.current(),
                    )
                    out.append(current)
                    continue
                out.extend(_stream_parts(changed, processor, current))
            parts = out
            if not parts:
                break
        return parts


def _with_hook(chain: Sequence[Any], hook_name: str) -> list[Any]:
    return with_hook(chain, hook_name)


def _responses(messages: list[Message]) -> list[Message]:
    """Output hooks shape responses: system messages are not responses; ids stay unique."""
    return unique_by_id(m for m in messages if m.role != "system")


def _checked_list(result: Any, processor: Any) -> list[Message]:
    if isinstance(result, (str, bytes)) or not isinstance(result, Sequence):
        raise TypeError(
            f"Processor {processor_id(processor)!r} returned {type(result).__name__}; "
            "expected a list of Message or None"
        )
    for item in result:
        if not isinstance(item, Message):
            raise TypeError(f"Processor {processor_id(processor)!r} returned a non-Message item: {item!r}")
    return list(result)


def _checked_tools(tools: Any, processor: Any) -> list[Tool]:
    if not isinstance(tools, (list, tuple)) or not all(isinstance(t, Tool) for t in tools):
        raise TypeError(
            f"Processor {processor_id(processor)!r} set ctx.tools to something not a list of Tool"
        )
    return list(tools)


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


def _tripwire(exc: TripWire, processor: Any, phase: Any) -> Tripwire:
    pid = exc.processor_id or processor_id(processor)
    return Tripwire(
        reason=exc.reason or f"Tripwire triggered by {pid}",
        processor_id=pid,
        phase=phase,
        retry=exc.retry,
        metadata=dict(exc.metadata),
    )
