"""TurnInfo: what a turn's processors recorded about the memory they put in front of the model.

Typed, so a processor writes a named field and a reader knows what it gets. It has two readers and
no say in what happens: `as_dict()` is the turn result's `memory` (the API's `memory` field, the
demo's memory panel), `manifest()` the turn record's manifest (ids and numbers, never text). Work a
processor asks for (a compaction fold) is a write on `Turn.writes`, which the turn's commit applies.

It lives in the processor layer, beside `Turn`, because processors write it; the turn engine only
reads it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "HistoryEntry",
    "MemorySearchRecord",
    "RecalledHit",
    "SummaryUsed",
    "TokenCount",
    "TurnInfo",
    "WorkingMemoryRead",
]


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """A message MessageHistory loaded into the window."""

    id: str
    role: str
    text: str

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "role": self.role, "text": self.text}


@dataclass(frozen=True, slots=True)
class RecalledHit:
    """A message SemanticRecall brought back (with its neighbours: `score` None)."""

    id: str
    thread_id: str | None
    text: str
    score: float | None

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "thread_id": self.thread_id, "text": self.text, "score": self.score}


@dataclass(slots=True)
class MemorySearchRecord:
    """One `search_memory` call: the scope it searched, the query's length (never its text), the
    hits as (message id, thread id, score), those a guardrail withheld, or why it was refused."""

    scope: str
    query_chars: int
    hits: list[tuple[str, str | None, float]] = field(default_factory=list)
    withheld: list[str] = field(default_factory=list)
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "scope": self.scope,
            "query_chars": self.query_chars,
            "hits": [{"id": i, "thread_id": t, "score": s} for i, t, s in self.hits],
            "withheld": list(self.withheld),
        }
        if self.error is not None:
            out["error"] = self.error
        return out


@dataclass(frozen=True, slots=True)
class WorkingMemoryRead:
    """Which working memory the turn read, and its version then."""

    scope: str
    key: str
    version: int

    def as_dict(self) -> dict[str, Any]:
        return {"scope": self.scope, "key": self.key, "version": self.version}


@dataclass(frozen=True, slots=True)
class SummaryUsed:
    """The thread summary (compaction) that entered the prompt."""

    covered_sequence: int
    version: int

    def as_dict(self) -> dict[str, Any]:
        return {"covered_sequence": self.covered_sequence, "version": self.version}


@dataclass(frozen=True, slots=True)
class TokenCount:
    """TokenLimiter's count of the prompt it let through."""

    total: int
    limit: int
    dropped: int

    def as_dict(self) -> dict[str, Any]:
        return {"total": self.total, "limit": self.limit, "dropped": self.dropped}


@dataclass
class TurnInfo:
    """What memory did this turn. A field left at its default was not recorded, and `as_dict()`
    leaves its key out (a client tells "no recall ran" from "recall found nothing")."""

    # The working-memory text the model was given, then as its tool left it.
    working_memory: str | None = None
    working_memory_version: WorkingMemoryRead | None = None
    # The history window; None when no MessageHistory loaded one.
    history: list[HistoryEntry] | None = None
    # Leading input messages that repeated the thread's newest (rule 17).
    echoed: int = 0
    summary: SummaryUsed | None = None
    recalled: list[RecalledHit] | None = None
    recall_error: bool = False
    # The model's `search_memory` calls (Memory(search_tool=True)), in order.
    searches: list[MemorySearchRecord] = field(default_factory=list)
    tokens: TokenCount | None = None
    # What guardrails kept out of the prompt or rewrote; each guardrail defines its records.
    withheld: list[dict[str, Any]] = field(default_factory=list)
    # (processor id, hook) -> (total ms, calls), steps and stream parts included.
    timings: dict[tuple[str, str], tuple[float, int]] = field(default_factory=dict)

    def time(self, processor_id: str, hook: str, ms: float) -> None:
        """Adds one hook call's time to the turn's total for that processor and hook."""
        total, calls = self.timings.get((processor_id, hook), (0.0, 0))
        self.timings[(processor_id, hook)] = (total + ms, calls + 1)

    def search_withheld(self, message_ids: list[str]) -> None:
        """Marks hits of the latest search a guardrail withheld from its result (guardrails screen a
        tool's result right after it ran, before the next call)."""
        if self.searches:
            self.searches[-1].withheld.extend(message_ids)

    def as_dict(self) -> dict[str, Any]:
        """The JSON shape of the turn result's `memory`: only the keys that were recorded."""
        out: dict[str, Any] = {}
        if self.working_memory is not None:
            out["working_memory"] = self.working_memory
        if self.working_memory_version is not None:
            out["working_memory_version"] = self.working_memory_version.as_dict()
        if self.history is not None:
            out["history"] = [h.as_dict() for h in self.history]
        if self.echoed:
            out["echoed"] = self.echoed
        if self.summary is not None:
            out["summary"] = self.summary.as_dict()
        if self.recall_error:
            out["recall_error"] = True
        if self.recalled is not None:
            out["recalled"] = [r.as_dict() for r in self.recalled]
        if self.searches:
            out["searches"] = [s.as_dict() for s in self.searches]
        if self.tokens is not None:
            out["tokens"] = self.tokens.as_dict()
        if self.withheld:
            out["withheld"] = list(self.withheld)
        if self.timings:
            out["processors"] = {f"{pid} {hook}": value for (pid, hook), value in self.timings.items()}
        return out

    def manifest(self) -> dict[str, Any]:
        """The turn record's manifest, why the model saw what it saw: ids and numbers, never text."""
        manifest: dict[str, Any] = {
            "history": [h.id for h in self.history or ()],
            "recalled": [
                {"id": r.id, "thread_id": r.thread_id, "score": r.score} for r in self.recalled or ()
            ],
            "recall_error": self.recall_error,
            "echoed": self.echoed,
            "working_memory": self.working_memory_version.as_dict() if self.working_memory_version else None,
            "tokens": self.tokens.as_dict() if self.tokens else None,
            "processors": [
                {"processor": pid, "hook": hook, "ms": round(ms, 3), "calls": calls}
                for (pid, hook), (ms, calls) in self.timings.items()
            ],
        }
        if self.searches:  # only then: older records and turns without the tool look the same
            manifest["searches"] = [s.as_dict() for s in self.searches]
        return manifest
