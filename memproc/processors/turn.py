"""The turn's state that processors read and record on: thread facts, tools, and the write buffer.

It lives in the processor layer so memory processors can record writes without reaching into
services; the turn engine (memproc.turns.engine) builds one per turn and memproc.turns.commit
saves `writes`. Everything here is plain data: processor tests build a `Turn` with no database.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from memproc.messages import Message
from memproc.processors.turn_info import TurnInfo
from memproc.tools import Tool

if TYPE_CHECKING:
    from memproc.processors.attachment_types import StagedAttachment
    from memproc.processors.compaction import CompactionDue
    from memproc.processors.store import MemoryStore

__all__ = ["PendingWorkingMemory", "Turn", "TurnWrites"]


@dataclass
class PendingWorkingMemory:
    """A working-memory change the model made; written with the turn's save (compare-and-swap)."""

    scope: str
    key: str
    value: Any
    mode: str
    template: str
    schema: dict[str, Any] | None
    # (text, version) as the turn read it, for the first change of a turn: the write swaps against it
    # without reading again; None for a later change, which follows the one before it.
    expected: tuple[str, int] | None = None
    # Fields the user pinned, as the turn read them: the save keeps their values.
    pinned: tuple[str, ...] = ()


@dataclass
class TurnWrites:
    """What memory processors asked to store; applied together at commit, dropped on abort."""

    messages: list[Message] = field(default_factory=list)
    embed: list[Message] = field(default_factory=list)
    embedder: Any = None
    # Vectors this turn already computed with `embedder`, by text (the recall query's): an inline
    # save stores them for a message of the same text instead of embedding it again.
    vectors: dict[str, Any] = field(default_factory=dict)
    vector_store: Any = None  # the recall processor's store: new vectors go where it searches
    working_memory: list[PendingWorkingMemory] = field(default_factory=list)
    generate_title: bool = False
    # A fold of the thread's older messages, enqueued with the save (MessageHistory with compaction).
    compaction: CompactionDue | None = None
    # What guardrails withheld after the input was settled (hits of a `search_memory` result): kept
    # on the turn's saved user message, `metadata["withheld"]`, as what they withhold on input is.
    withheld: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Turn:
    """One turn: who it is for, what the thread looked like when it started, what it will write."""

    # The agent as processors (`ctx.agent`) and tools (`ToolContext.agent`) see it; the turn's own
    # code reads its TurnPlan instead (memproc.turns.plan).
    agent: Any
    thread_id: str | None
    resource_id: str | None
    store: MemoryStore | None
    input_messages: list[Message]
    # Ids the caller chose (not generated here): only these can clash with stored messages.
    client_ids: set[str] = field(default_factory=set)
    # System messages the caller sent: used for this turn after the instructions, never saved.
    system_input: list[Message] = field(default_factory=list)
    thread_exists: bool = False
    thread_title: str = ""
    thread_last_sequence: int | None = None  # as read at the start of the turn
    # Stored messages this turn replaces (a regenerated answer, an edited message and what followed):
    # hidden from its reads, deleted in the transaction that saves it, kept if it saves nothing.
    replaces: list[str] = field(default_factory=list)
    loaded_ids: set[str] = field(default_factory=set)
    tools: dict[str, Tool] = field(default_factory=dict)
    writes: TurnWrites = field(default_factory=TurnWrites)
    # Per-call overrides of the Memory options (rule 22), already validated.
    memory_options: dict[str, Any] = field(default_factory=dict)
    # Files AttachmentUploader stored for this turn: their rows are written at commit; the files the
    # turn wrote are deleted if it ends without committing (blocked, failed or abandoned).
    attachments: list[StagedAttachment] = field(default_factory=list)
    # What memory did this turn, for inspection (the demo's memory panel, the API's `memory` field)
    # and for the turn record's manifest.
    info: TurnInfo = field(default_factory=TurnInfo)
    # The turn's OpenTelemetry span (memproc.telemetry; a no-op without the otel extra).
    trace: Any = None

    def add_tool(self, tool: Tool) -> None:
        self.tools[tool.name] = tool

    def mark_loaded(self, messages: list[Message]) -> None:
        self.loaded_ids.update(m.id for m in messages)

    @property
    def internal_tool_names(self) -> set[str]:
        return {name for name, t in self.tools.items() if t.internal}

    def memory_report(self) -> dict[str, Any]:
        """The turn result's `memory`: what memory did, and the fold it asked for (`compaction`)."""
        report = self.info.as_dict()
        if self.writes.compaction is not None:
            report["compaction"] = self.writes.compaction.as_dict()
        return report
