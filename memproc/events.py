"""Results and stream events of a turn: what `Agent.generate` returns and `Agent.stream` yields."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from memproc.llm.types import ToolCall
    from memproc.messages import Message, ToolResultPart

Phase = Literal["input", "input_step", "output_step", "tool_result", "output", "stream"]
# "retry": an output hook rejected the draft streamed so far; a new attempt follows (rule 19).
EventType = Literal["text-delta", "tool-call", "tool-result", "tripwire", "retry", "finish"]


@dataclass(frozen=True, slots=True)
class Tripwire:
    """Why a turn was blocked; `result.tripwire` and the API's `tripwire` field."""

    reason: str
    processor_id: str
    phase: Phase
    retry: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "reason": self.reason,
            "processor_id": self.processor_id,
            "phase": self.phase,
            "retry": self.retry,
            "metadata": dict(self.metadata),
        }


@dataclass(frozen=True, slots=True)
class GenerateResult:
    text: str
    messages: list[Message]
    tripwire: Tripwire | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    thread_id: str | None = None
    resource_id: str | None = None
    # What memory put in front of the model (system messages + history + input), for inspection.
    prompt: list[Message] = field(default_factory=list)
    steps: int = 0
    # What memory did: history ids, recalled messages, working memory, token count after limiting.
    memory: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class StreamEvent:
    type: EventType
    text: str = ""
    tool_call: ToolCall | None = None
    tool_result: ToolResultPart | None = None
    tripwire: Tripwire | None = None
    result: GenerateResult | None = None
    usage: dict[str, Any] | None = None
    finish_reason: str | None = None
