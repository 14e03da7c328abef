"""Helpers for guardrail tests: contexts built by hand (no database) and a stream driver.

History passed to `make_ctx` counts as loaded from memory (`ctx.loaded_ids`); `new` is the turn's
own input (and, on output, its responses). `run_stream` feeds text deltas through a processor's
`process_output_stream` the way a runner that passes the model's `finish` event and accepts lists
of parts does, and returns what the client would receive.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from types import SimpleNamespace
from typing import Any

from memproc.events import StreamEvent
from memproc.llm.types import ToolCall
from memproc.messages import Message, TextPart, ToolCallPart
from memproc.processors.base import ProcessorContext

# One value of each type PIIDetector finds by default.
SAMPLES = {
    "email": "ada.lovelace+notes@example.co.uk",
    "phone": "+44 20 7946 0958",
    "credit_card": "4111 1111 1111 1111",
    "iban": "DE89 3704 0044 0532 0130 00",
    "ip_address": "192.168.10.42",
    "us_ssn": "123-45-6789",
    "api_key": "sk-proj-abcdefghijklmnopqrstuvwxyz012345",
}


def user(text: str, *, id: str | None = None) -> Message:
    return Message.create("user", text, id=id)


def assistant(text: str, *, id: str | None = None) -> Message:
    return Message.create("assistant", text, id=id)


def system(text: str, *, id: str | None = None) -> Message:
    return Message.create("system", text, id=id)


def assistant_calling(call_id: str, text: str = "", *, id: str | None = None) -> Message:
    parts: list[Any] = [TextPart(text)] if text else []
    parts.append(ToolCallPart(call_id, "lookup", {"q": "x"}))
    return Message.create("assistant", parts, id=id)


def make_ctx(
    history: Sequence[Message] = (),
    new: Sequence[Message] = (),
    *,
    system_messages: Sequence[Message] = (),
    phase: str = "input",
    state: dict[str, Any] | None = None,
    instructions: str | None = None,
    processor_id: str = "guard",
) -> ProcessorContext:
    return ProcessorContext(
        processor_id=processor_id,
        messages=(*history, *new),
        system_messages=tuple(system_messages),
        phase=phase,
        thread_id="t1",
        resource_id="user-1",
        agent=SimpleNamespace(id="agent", instructions=instructions) if instructions is not None else None,
        state={} if state is None else state,
        loaded_ids=frozenset(m.id for m in history),
    )


def stream_ctx(ctx: ProcessorContext) -> ProcessorContext:
    """The context a stream hook gets: same state and system messages, no messages."""
    return ProcessorContext(
        processor_id=ctx.processor_id,
        messages=(),
        system_messages=ctx.system_messages,
        phase="stream",
        thread_id=ctx.thread_id,
        resource_id=ctx.resource_id,
        agent=ctx.agent,
        state=ctx.state,
        loaded_ids=ctx.loaded_ids,
    )


def run_stream(
    processor: Any,
    deltas: Iterable[str],
    *,
    ctx: ProcessorContext | None = None,
    tool_call_id: str | None = None,
    finish: bool = True,
) -> list[StreamEvent]:
    """Feeds text deltas (then a tool call, then finish) and returns the parts a client receives."""
    ctx = stream_ctx(ctx or make_ctx(phase="stream"))
    events = [StreamEvent(type="text-delta", text=d) for d in deltas]
    if tool_call_id:
        events.append(StreamEvent(type="tool-call", tool_call=ToolCall(tool_call_id, "lookup", {})))
    if finish:
        events.append(StreamEvent(type="finish", usage={}, finish_reason="stop"))
    out: list[StreamEvent] = []
    for event in events:
        result = processor.process_output_stream(ctx, event)
        if result is None:
            continue
        out.extend(result if isinstance(result, list) else [result])
    return out


def streamed_text(events: Iterable[StreamEvent]) -> str:
    return "".join(e.text for e in events if e.type == "text-delta")


def split_every(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]
