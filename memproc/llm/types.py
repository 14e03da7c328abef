"""The model-facing types: what a `ChatModel` receives and returns."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from memproc.events import StreamEvent
from memproc.messages import Message


@dataclass(frozen=True, slots=True)
class ToolSpec:
    name: str
    description: str
    parameters: dict[str, Any]

    def to_openai(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    args: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ModelRequest:
    messages: list[Message]  # system messages first
    tools: list[ToolSpec] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ModelResponse:
    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: dict[str, Any] = field(default_factory=dict)
    finish_reason: str = "stop"


@runtime_checkable
class ChatModel(Protocol):
    id: str

    def generate(self, request: ModelRequest) -> ModelResponse: ...


class StreamingChatModel(ChatModel, Protocol):
    def stream(self, request: ModelRequest) -> Iterator[StreamEvent]:
        """Yields `text-delta` and `tool-call` events, then one `finish` event carrying `usage`."""
        ...
