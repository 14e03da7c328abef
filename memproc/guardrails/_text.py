"""Which messages a guardrail reads in each phase, and how it returns changed copies of them."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from memproc.messages import Message, TextPart
from memproc.processors.base import ProcessorContext


def input_targets(ctx: ProcessorContext) -> list[Message]:
    """The turn's own new messages (never history or recall that memory loaded), system excluded."""
    return [m for m in ctx.new_messages if m.role != "system"]


def caller_texts(ctx: ProcessorContext) -> list[Message]:
    """On input, what the caller sent: its user messages, and assistant messages it says the model
    wrote (a client may send any; a forged "assistant" turn is as much the caller's text)."""
    return [m for m in ctx.new_messages if m.role in ("user", "assistant")]


def response_targets(ctx: ProcessorContext) -> list[Message]:
    """On output, the model's responses: new assistant messages (the turn's input was seen on input)."""
    return [m for m in ctx.new_messages if m.role == "assistant"]


def map_text(message: Message, transform: Callable[[str], str]) -> Message:
    """A copy of `message` with `transform` applied to each text part; the same object if unchanged."""
    parts: list[Any] = []
    changed = False
    for part in message.parts:
        if isinstance(part, TextPart):
            text = transform(part.text)
            if text != part.text:
                changed = True
                parts.append(TextPart(text))
                continue
        parts.append(part)
    return message.replace(parts=tuple(parts)) if changed else message


def texts(message: Message) -> list[str]:
    return [p.text for p in message.parts if isinstance(p, TextPart) and p.text]


def with_replacements(ctx: ProcessorContext, replaced: Mapping[str, Message]) -> list[Message] | None:
    """ctx.messages with the messages in `replaced` (by id) swapped in; None when nothing changed."""
    if not replaced:
        return None
    return [replaced.get(m.id, m) for m in ctx.messages]


def plural(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{name} ({count})" for name, count in counts.items())


def merge_counts(into: dict[str, int], more: Iterable[tuple[str, int]]) -> dict[str, int]:
    for name, count in more:
        into[name] = into.get(name, 0) + count
    return into
