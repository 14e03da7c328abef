"""What the turn panels show (memproc.admin.turn_panels builds them from a turn record): plain
objects the templates read, with links already resolved."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


@dataclass
class MessageRef:
    """A message the manifest names: a link into the transcript or to its admin page."""

    id: str
    label: str
    url: str | None = None
    excerpt: str = ""
    role: str = ""
    on_page: bool = False
    missing: bool = False


@dataclass
class RecallRef(MessageRef):
    score: float | None = None
    score_pct: int = 0
    thread_id: str = ""  # the id people use, never the key
    thread_url: str | None = None
    same_thread: bool = False


@dataclass
class SearchHitRef(RecallRef):
    withheld: bool = False  # a guardrail took it out of the result the model read


@dataclass
class SearchView:
    """One `search_memory` call of the turn: what it searched and found (never the query's text)."""

    scope: str
    query_chars: int
    hits: list[SearchHitRef] = field(default_factory=list)
    error: str = ""


@dataclass
class HookTiming:
    processor: str
    hook: str
    ms: float
    calls: int
    pct: float


@dataclass
class WorkingMemoryRef:
    scope: str
    key: str  # the stored key: a thread's key or the resource id
    label: str  # how a person names the owner: the thread id or the resource id
    version: int
    owner_url: str | None
    revisions_url: str | None
    version_url: str | None


@dataclass
class TokenCounts:
    total: int
    limit: int | None
    dropped: int
    pct: float


@dataclass
class TurnView:
    id: str
    url: str | None
    status: str
    status_label: str
    agent_id: str
    model: str
    steps: int
    started_at: datetime | None
    duration_ms: float
    usage: list[tuple[str, Any]] = field(default_factory=list)
    history: list[MessageRef] = field(default_factory=list)
    recalled: list[RecallRef] = field(default_factory=list)
    recall_error: bool = False
    searches: list[SearchView] = field(default_factory=list)
    echoed: int = 0
    working_memory: WorkingMemoryRef | None = None
    tokens: TokenCounts | None = None
    processors: list[HookTiming] = field(default_factory=list)
    other_ms: float = 0.0
    other_pct: float = 0.0
    saved: list[MessageRef] = field(default_factory=list)
    tripwire_url: str | None = None
    tripwire_id: str = ""
    error: str = ""

    usage_tokens: int | None = None
    own_page: bool = False  # shown on the record's own admin page, not under a reply


# --- the transcript --------------------------------------------------------------------------------
