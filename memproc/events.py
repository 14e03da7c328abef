"""Results and stream events of a turn: what `Agent.generate` returns and `Agent.stream` yields."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from memproc.llm.types import ToolCall
    from memproc.messages import Message, ToolResultPart

Phase = Literal["input", "input_step", "output_step", "tool_result", "output", "stream"]
# "retry": an output hook rejected the draft streamed so far; a new attempt follows (rule 19).
# "tool-approval": a call waits for a person's decision; "suspended": the turn stops there, saved
# nowhere but its PendingToolCall, and resumes once the call is decided (memproc.services.approvals).
EventType = Literal[
    "text-delta", "tool-call", "tool-result", "tripwire", "retry", "tool-approval", "suspended", "finish"
]


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
class PendingCall:
    """A tool call the turn waits on: `result.pending` of a suspended turn and the stream's
    `tool-approval` / `suspended` events. `id` is its PendingToolCall's; `kind` is "approval" (a
    person decides) or "client" (the caller answers with the result)."""

    id: str
    tool_name: str
    tool_call_id: str
    args: dict[str, Any]
    kind: str = "approval"
    expires_at: datetime | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "tool_name": self.tool_name,
            "tool_call_id": self.tool_call_id,
            "args": dict(self.args),
            "kind": self.kind,
            "expires_at": self.expires_at.isoformat() if self.expires_at else None,
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
    # The call a suspended turn waits on; None for a turn that ran to its end (or was blocked).
    pending: PendingCall | None = None

    @property
    def suspended(self) -> bool:
        return self.pending is not None


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
    pending: PendingCall | None = None
