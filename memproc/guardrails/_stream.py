"""Hold-back buffering for guardrails that rewrite streamed text (PIIDetector, SystemPromptScrubber).

A pattern can straddle two text deltas ("ada@exa" + "mple.com"). A guard that rewrote each delta
alone would let the first half out before it could recognise the whole. So each delta is added to a
held buffer, and the guard releases only the part of the buffer that no later text can change the
verdict on (`StreamGuard.release`); the rest waits for more text. When the model's step ends, the
`finish` event flushes what is still held (`StreamGuard.flush`), emitted as one more text delta just
before the finish event.

The trade-off: the stream runs a little behind the model (the held tail: a few dozen characters,
or the length of a match still growing), in exchange for never emitting half a match.

Runners that do not pass the model's `finish` event through `process_output_stream` (or that do not
accept a list of parts from it) cannot get that last flush out on the stream. For them the guard's
`process_output_result` calls `repair`, which appends each step's never-emitted tail (already
rewritten) to the assistant message it belongs to, so the result and what memory saves are whole;
only the live stream missed the tail. The step a tail belongs to is found by its first tool-call id,
or for the last step by the text it ends with; a tail that cannot be placed is logged and dropped.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from typing import Protocol

from memproc.events import StreamEvent
from memproc.messages import Message, TextPart
from memproc.processors.base import ProcessorContext

logger = logging.getLogger("memproc.guardrails")

STATE_KEY = "stream"
ANCHOR_CHARS = 48


class StreamGuard(Protocol):
    def release(self, ctx: ProcessorContext, pending: str) -> tuple[str, str]:
        """Splits the held raw text into (rewritten text safe to emit now, raw text to keep holding)."""
        ...

    def flush(self, ctx: ProcessorContext, pending: str) -> str:
        """The rewritten form of all still-held text: the step is over, nothing more will come."""
        ...


@dataclass
class _Step:
    anchor: str  # the last characters this guard emitted in the step
    lost: str  # rewritten held text that never got onto the stream
    tool_call_id: str | None  # the step's first tool call, which names its assistant message


@dataclass
class HoldState:
    pending: str = ""
    anchor: str = ""
    tool_call_id: str | None = None
    tool_calls_seen: bool = False
    attempt: tuple[str, ...] = ()
    closed: list[_Step] = field(default_factory=list)


def stream_part(
    guard: StreamGuard, ctx: ProcessorContext, part: StreamEvent
) -> StreamEvent | list[StreamEvent] | None:
    state = _state(ctx)
    if part.type == "text-delta":
        if not part.text:
            return part
        if state.tool_calls_seen:  # the previous step ended in tool calls and no finish event came
            _close_step(guard, ctx, state)
        state.pending += part.text
        out, state.pending = guard.release(ctx, state.pending)
        if not out:
            return None
        state.anchor = (state.anchor + out)[-ANCHOR_CHARS:]
        return dataclasses.replace(part, text=out)
    if part.type == "tool-call":
        if not state.tool_calls_seen and part.tool_call is not None:
            state.tool_call_id = part.tool_call.id or None
        state.tool_calls_seen = True
        return part
    if part.type == "finish":
        tail = guard.flush(ctx, state.pending) if state.pending else ""
        ctx.state[STATE_KEY] = HoldState(attempt=state.attempt, closed=state.closed)
        return [StreamEvent(type="text-delta", text=tail), part] if tail else part
    return part


def repair(guard: StreamGuard, ctx: ProcessorContext, messages: list[Message]) -> list[Message]:
    """`messages` with the stream's never-emitted tails put back (see the module docstring)."""
    state = ctx.state.pop(STATE_KEY, None)
    if not isinstance(state, HoldState):
        return messages
    if state.tool_calls_seen:
        _close_step(guard, ctx, state)
    final = guard.flush(ctx, state.pending) if state.pending else ""
    steps = [step for step in state.closed if step.lost]
    if not steps and not final:
        return messages
    result = list(messages)
    new_ids = {m.id for m in ctx.new_messages}
    for step in steps:
        index = _find_tool_step(result, new_ids, step)
        if index is None:
            logger.warning("memproc: %s could not place %d held characters", ctx.processor_id, len(step.lost))
            continue
        result[index] = _append_before_tool_calls(result[index], step.lost)
    if final:
        result = _repair_final(ctx, result, new_ids, final, state.anchor)
    return result


def _state(ctx: ProcessorContext) -> HoldState:
    attempt = tuple(m.id for m in ctx.system_messages)
    state = ctx.state.get(STATE_KEY)
    if not isinstance(state, HoldState) or state.attempt != attempt:
        # A retried turn sends the model a feedback system message; what the rejected draft left
        # held must not leak into the new answer.
        state = HoldState(attempt=attempt)
        ctx.state[STATE_KEY] = state
    return state


def _close_step(guard: StreamGuard, ctx: ProcessorContext, state: HoldState) -> None:
    lost = guard.flush(ctx, state.pending) if state.pending else ""
    state.closed.append(_Step(anchor=state.anchor, lost=lost, tool_call_id=state.tool_call_id))
    state.pending, state.anchor, state.tool_call_id, state.tool_calls_seen = "", "", None, False


def _find_tool_step(messages: list[Message], new_ids: set[str], step: _Step) -> int | None:
    for index, message in enumerate(messages):
        if message.id not in new_ids or message.role != "assistant" or not message.tool_calls:
            continue
        if step.tool_call_id and any(c.tool_call_id == step.tool_call_id for c in message.tool_calls):
            return index
    return None


def _repair_final(
    ctx: ProcessorContext, messages: list[Message], new_ids: set[str], tail: str, anchor: str
) -> list[Message]:
    last = next(
        (
            i
            for i in range(len(messages) - 1, -1, -1)
            if messages[i].id in new_ids and messages[i].role != "user"
        ),
        None,
    )
    if last is not None and messages[last].role == "assistant" and not messages[last].tool_calls:
        if messages[last].text.endswith(anchor):
            messages[last] = _append_before_tool_calls(messages[last], tail)
            return messages
    elif not anchor:  # the whole last step was held: the runner saw no text and made no message
        from django.utils import timezone

        messages.append(
            Message.create(
                "assistant",
                tail,
                thread_id=ctx.thread_id,
                resource_id=ctx.resource_id,
                created_at=timezone.now(),
            )
        )
        return messages
    logger.warning("memproc: %s could not place %d held characters", ctx.processor_id, len(tail))
    return messages


def _append_before_tool_calls(message: Message, text: str) -> Message:
    parts = list(message.parts)
    last_text = max((i for i, p in enumerate(parts) if isinstance(p, TextPart)), default=None)
    if last_text is not None:
        parts[last_text] = TextPart(parts[last_text].text + text)
    else:
        first_call = next((i for i, p in enumerate(parts) if p.type == "tool-call"), len(parts))
        parts.insert(first_call, TextPart(text))
    return message.replace(parts=tuple(parts))
