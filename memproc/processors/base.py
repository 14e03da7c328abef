"""The processor protocol and the context each processor call receives."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn, Protocol, runtime_checkable

from memproc.events import StreamEvent
from memproc.exceptions import TripWire
from memproc.messages import Message

if TYPE_CHECKING:
    from memproc.agents.agent import Agent
    from memproc.processors.store import MemoryStore
    from memproc.services.turns import Turn

__all__ = ["Processor", "ProcessorContext", "TripWire", "processor_id"]


@runtime_checkable
class Processor(Protocol):
    """Any object with an `id` and one or more of the hooks below (sync or `async def`).

    `process_input` and `process_output_result` return the new message list, or None to keep it.
    `process_output_stream` returns the part, a changed part, or None to drop that part.
    """

    id: str


def processor_id(processor: Any) -> str:
    pid = getattr(processor, "id", None)
    if not isinstance(pid, str) or not pid:
        raise TypeError(f"{processor!r} is not a processor: it needs a non-empty string `id`")
    return pid


@dataclass
class ProcessorContext:
    """What one processor call sees. `messages` is read-only: return new objects, never mutate.

    `loaded_ids` are the ids of messages that memory loaded (history, recall); everything else in
    `messages` is the turn's own new input (and, on output, its responses).
    """

    processor_id: str
    messages: Sequence[Message]
    system_messages: Sequence[Message] = ()
    phase: str = "input"
    thread_id: str | None = None
    resource_id: str | None = None
    agent: Agent | None = None
    store: MemoryStore | None = None
    state: dict[str, Any] = field(default_factory=dict)
    loaded_ids: frozenset[str] = frozenset()
    turn: Turn | None = None  # the runner's turn object; memory processors record writes on it

    @property
    def new_messages(self) -> list[Message]:
        """The turn's own new messages in `messages` (not history or recall loaded from memory)."""
        return [m for m in self.messages if m.id not in self.loaded_ids]

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
