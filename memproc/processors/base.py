"""The processor protocol and the context each processor call receives."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn, Protocol, runtime_checkable

from memproc.events import StreamEvent
from memproc.exceptions import TripWire
from memproc.llm.types import ModelRequest, ToolCall
from memproc.messages import Message

if TYPE_CHECKING:
    from memproc.processors.store import MemoryStore
    from memproc.processors.turn import Turn
    from memproc.tools import Tool

__all__ = ["HOOKS", "Processor", "ProcessorContext", "TripWire", "processor_id"]

# Hook name -> the Tripwire phase an abort in it reports.
HOOKS = {
    "process_input": "input",
    "process_input_step": "input_step",
    "process_output_step": "output_step",
    "process_tool_result": "tool_result",
    "process_output_result": "output",
    "process_output_stream": "stream",
    # After a model call failed; it cannot block a turn (an abort there is an error), so this phase
    # never reaches a Tripwire.
    "process_api_error": "api_error",
}


@runtime_checkable
class Processor(Protocol):
    """Any object with an `id` and one or more hooks (sync or `async def`); see DESIGN §1.

    `process_input` (once, before the first model call), `process_input_step` (before every model
    call), `process_output_step` (after every model response, before its tools run),
    `process_tool_result` (after each tool), `process_output_result` (once, after the final
    response) return the new message list or None to keep it; `process_tool_result` returns a
    ToolResultPart or None; `process_output_stream` returns a part, a list of parts or None.
    `process_api_error(ctx, error)` (after a model call failed with a `ModelError`; `ctx.request`
    is the failed request) returns a changed `ModelRequest` to retry with, or None to let the error
    stand; its retries count with the turn's other processor retries.
    """

    id: str


def processor_id(processor: Any) -> str:
    pid = getattr(processor, "id", None)
    if not isinstance(pid, str) or not pid:
        raise TypeError(f"{processor!r} is not a processor: it needs a non-empty string `id`")
    return pid


@dataclass
class ProcessorContext:
    """What one processor call sees. Messages are frozen: return new objects, never mutate.

    `messages` is, on input hooks, the prompt so far (memory, then the turn's input, then on steps
    the turn's responses so far); on output hooks, the turn's RESPONSES only. `input_messages` is the
    turn's new input in every hook. `loaded_ids` are the ids memory loaded (history, recall).
    A step hook may assign `system_messages` or `tools` to change what that one model call sees.
    """

    processor_id: str
    messages: Sequence[Message]
    system_messages: Sequence[Message] = ()
    phase: str = "input"
    thread_id: str | None = None
    resource_id: str | None = None
    agent: Any = None
    store: MemoryStore | None = None
    state: dict[str, Any] = field(default_factory=dict)
    loaded_ids: frozenset[str] = frozenset()
    input_messages: Sequence[Message] = ()
    step: int = 0
    tool_calls: Sequence[ToolCall] = ()
    tools: list[Tool] = field(default_factory=list)
    # In `process_api_error`: the model request that failed, as the hooks before this one left it.
    request: ModelRequest | None = None
    # The turn's state and write buffer (processor layer); None in a bare call outside a turn.
    turn: Turn | None = None
    # This hook call's OpenTelemetry span (a no-op without the otel extra): the parent for spans a
    # processor opens itself (`memproc.telemetry.span(..., parent=ctx.span)`).
    span: Any = None

    @property
    def new_messages(self) -> list[Message]:
        """The turn's own messages in `messages` (not history or recall loaded from memory)."""
        return [m for m in self.messages if m.id not in self.loaded_ids]

    def mark_loaded(self, messages: Sequence[Message]) -> None:
        """Tells the conversation that `messages` come from memory (history, recall), not new input:
        they are ordered by time before the input, never saved again, and dropped whole when a tool
        pair among them is incomplete."""
        ids = {m.id for m in messages}
        self.loaded_ids = self.loaded_ids | ids
        if self.turn is not None:
            self.turn.loaded_ids.update(ids)

    def abort(
        self, reason: str | None = None, *, retry: bool = False, metadata: dict[str, Any] | None = None
    ) -> NoReturn:
        """Stops the turn with a tripwire. Never returns."""
        raise TripWire(
            reason or f"Tripwire triggered by {self.processor_id}",
            processor_id=self.processor_id,
            retry=retry,
            metadata=metadata,
        )


StreamPart = StreamEvent
