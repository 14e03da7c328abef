"""Helpers for pure processor tests: build messages and a ProcessorContext, no database.

History passed to `make_ctx` counts as loaded from memory (`ctx.loaded_ids`); `new` is the turn's
own input. `StubCounter` gives each message the cost in its metadata ("tokens"), or one token per
word, so budgets in tests are plain arithmetic.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from memproc.messages import Message, TextPart, ToolCallPart, ToolResultPart
from memproc.processors.base import ProcessorContext
from memproc.processors.tokens import QuicktokCounter


def message(role: str, text: str = "", *, id: str | None = None, tokens: int | None = None) -> Message:
    metadata = {"tokens": tokens} if tokens is not None else {}
    return Message.create(role, text, id=id, metadata=metadata)


def user(text: str, **kwargs: Any) -> Message:
    return message("user", text, **kwargs)


def assistant(text: str, **kwargs: Any) -> Message:
    return message("assistant", text, **kwargs)


def system(text: str, **kwargs: Any) -> Message:
    return message("system", text, **kwargs)


def tool_call(
    call_id: str,
    tool_name: str = "search",
    args: Mapping[str, Any] | None = None,
    *,
    text: str = "",
    id: str | None = None,
    tokens: int | None = None,
) -> Message:
    """An assistant message calling one tool, with optional text before the call."""
    parts: list[Any] = [TextPart(text)] if text else []
    parts.append(ToolCallPart(call_id, tool_name, args or {"q": "x"}))
    metadata = {"tokens": tokens} if tokens is not None else {}
    return Message.create("assistant", parts, id=id, metadata=metadata)


def tool_result(
    call_id: str,
    tool_name: str = "search",
    result: Any = "ok",
    *,
    id: str | None = None,
    tokens: int | None = None,
) -> Message:
    metadata = {"tokens": tokens} if tokens is not None else {}
    return Message.create("tool", [ToolResultPart(call_id, tool_name, result)], id=id, metadata=metadata)


def make_ctx(
    history: Sequence[Message] = (),
    new: Sequence[Message] = (),
    *,
    system_messages: Sequence[Message] = (),
    phase: str = "input",
    processor_id: str = "test",
    state: dict[str, Any] | None = None,
) -> ProcessorContext:
    return ProcessorContext(
        processor_id=processor_id,
        messages=(*history, *new),
        system_messages=tuple(system_messages),
        phase=phase,
        thread_id="t1",
        resource_id="user-1",
        state={} if state is None else state,
        loaded_ids=frozenset(m.id for m in history),
    )


def ids(messages: Sequence[Message] | None) -> list[str] | None:
    return None if messages is None else [m.id for m in messages]


class StubCounter:
    """Cost = metadata["tokens"] if set, else one token per word; text costs one token per word."""

    id = "stub"

    def count_text(self, text: str) -> int:
        return len(text.split())

    def count_message(self, message: Message) -> int:
        if "tokens" in message.metadata:
            return message.metadata["tokens"]
        return sum(self.count_text(p.text) for p in message.parts if isinstance(p, TextPart))


@pytest.fixture
def stub_counter() -> StubCounter:
    return StubCounter()


@pytest.fixture(scope="session")
def o200k() -> QuicktokCounter:
    return QuicktokCounter(encoding="o200k_base")
