"""The store protocol processors use to reach stored data, and an in-memory implementation.

The Django implementation is `memproc.services.store.DjangoMemoryStore`; `InMemoryStore` keeps
everything in dicts, so processor tests (and users' own) run without a database.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from memproc.messages import Message

if TYPE_CHECKING:
    from memproc.processors.attachment_types import AttachmentStore

__all__ = ["InMemoryStore", "MemoryStore", "ThreadSummaryValue", "VectorHit", "WorkingMemoryValue"]


@dataclass(frozen=True, slots=True)
class VectorHit:
    message_id: str
    thread_id: str
    score: float  # cosine similarity, higher is closer


@dataclass(frozen=True, slots=True)
class WorkingMemoryValue:
    text: str
    version: int
    pinned: tuple[str, ...] = ()  # fields the user pinned (resource scope): the model cannot change them


@dataclass(frozen=True, slots=True)
class ThreadSummaryValue:
    """A thread's stored summary: `text` tells what the messages up to `covered_sequence` said.
    `counted_tokens` is what the messages after it through `counted_through` hold, when a job
    counted them (and found too few to fold); 0 when unknown."""

    text: str
    covered_sequence: int
    version: int
    counted_through: int = 0
    counted_tokens: int = 0


class MemoryStore(Protocol):
    def messages_recent(
        self, *, thread_id: str, resource_id: str | None, limit: int, last_sequence: int | None = None
    ) -> list[Message]:
        """The newest `limit` messages of the resource's thread, oldest first (`last_sequence`: a hint)."""
        ...

    def messages_existing(self, *, ids: Iterable[str], resource_id: str | None) -> dict[str, tuple[str, str]]:
        """Which of `resource_id`'s `ids` are stored: id -> (resource id, thread id) of its thread. A
        message id names a message within its resource, as a thread id names a thread."""
        ...

    def messages_around(
        self, *, message_ids: Sequence[str], resource_id: str | None, before: int, after: int
    ) -> dict[str, list[Message]]:
        """Each of `resource_id`'s messages with `before`/`after` neighbours from its own thread, in
        order, keyed by thread id (recall searches one resource, so a thread id is enough)."""
        ...

    def query_vector(self, *, text: str, embedder: Any) -> np.ndarray:
        """The embedding of a recall query (cached: the same text is embedded again for storage)."""
        ...

    def vectors_search(
        self,
        *,
        embedder_id: str,
        vector: np.ndarray,
        top_k: int,
        thread_id: str | None = None,
        resource_id: str | None = None,
        threshold: float | None = None,
        vector_store: Any = None,
    ) -> list[VectorHit]: ...

    def threads_archived(self, *, resource_id: str | None) -> Iterable[str]:
        """The ids of the resource's archived threads, which recall leaves out unless the agent
        includes them. Optional: SemanticRecall treats a store without it as one with none."""
        ...

    def working_memory_get(
        self, *, scope: str, key: str, resource_id: str | None = None
    ) -> WorkingMemoryValue:
        """`key` is the thread id (scope "thread", of `resource_id`'s thread) or the resource id."""
        ...

    def thread_metadata(self, *, thread_id: str, resource_id: str | None) -> dict[str, Any] | None: ...

    def thread_summary(self, *, thread_id: str, resource_id: str | None) -> ThreadSummaryValue | None:
        """The thread's summary (`Memory(compaction=...)`), or None before the first fold. A store
        may answer from a read it already made this turn (the Django one does: no query). Optional:
        MessageHistory treats a store without it as one with no summaries."""
        ...

    def attachment_store(self) -> AttachmentStore:
        """Where AttachmentUploader stores files when it was given no storage of its own."""
        ...


@dataclass
class InMemoryStore:
    """A `MemoryStore` over plain dicts: threads are lists of messages in order, vectors are exact.

    `add(thread_id, messages, embedder=...)` stores messages (and their vectors when an embedder is
    given); `working_memory[(scope, key)]` holds working-memory text; `summaries[thread_id]` a
    thread's summary; `archived` the ids of archived threads; `recall_excluded` the ids of messages
    recall leaves out (as `Message.recall_excluded`); `pinned[resource id]` its pinned fields.
    """

    threads: dict[str, list[Message]] = field(default_factory=dict)
    vectors: dict[str, tuple[str, str, str, np.ndarray]] = field(default_factory=dict)
    working_memory: dict[tuple[str, str], str] = field(default_factory=dict)
    metadata: dict[str, dict[str, Any]] = field(default_factory=dict)
    summaries: dict[str, ThreadSummaryValue] = field(default_factory=dict)
    attachments: Any = None
    archived: set[str] = field(default_factory=set)  # last: positional construction stays as it was
    recall_excluded: set[str] = field(default_factory=set)
    pinned: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def add(self, thread_id: str, messages: Sequence[Message], *, embedder: Any = None) -> None:
        stored = self.threads.setdefault(thread_id, [])
        last = stored[-1].sequence or len(stored) if stored else 0
        stored.extend([m.replace(thread_id=thread_id, sequence=last + i + 1) for i, m in enumerate(messages)])
        if embedder is not None:
            embeddable = [m for m in messages if m.role in ("user", "assistant") and m.text.strip()]
            for message, vector in zip(embeddable, embedder.embed([m.text for m in embeddable]), strict=True):
                self.vectors[message.id] = (
                    embedder.id,
                    thread_id,
                    message.resource_id or "",
                    np.asarray(vector, dtype=np.float32),
                )

    def messages_recent(
        self, *, thread_id: str, resource_id: str | None, limit: int, last_sequence: int | None = None
    ) -> list[Message]:
        return list(self.threads.get(thread_id, [])[-limit:]) if limit else []

    def messages_existing(self, *, ids: Iterable[str], resource_id: str | None) -> dict[str, tuple[str, str]]:
        """One resource's threads: a stored message's resource id is the one it was added with, or
        the asking turn's when it was added without one (`resource_id=None` here stands for that).
        Another resource's message is not there for the asking turn."""
        wanted = set(ids)
        return {
            m.id: (m.resource_id or "", tid)
            for tid, messages in self.threads.items()
            for m in messages
            if m.id in wanted and (not m.resource_id or not resource_id or m.resource_id == resource_id)
        }

    def messages_around(
        self, *, message_ids: Sequence[str], resource_id: str | None, before: int, after: int
    ) -> dict[str, list[Message]]:
        wanted = set(message_ids) - self.recall_excluded
        groups: dict[str, list[Message]] = {}
        for tid, messages in self.threads.items():
            keep: set[int] = set()
            for i, message in enumerate(messages):
                if message.id in wanted:
                    keep.update(range(max(0, i - before), min(len(messages), i + after + 1)))
            kept = [messages[i] for i in sorted(keep) if messages[i].id not in self.recall_excluded]
            if kept:
                groups[tid] = kept
        return groups

    def query_vector(self, *, text: str, embedder: Any) -> np.ndarray:
        return np.asarray(embedder.embed([text])[0], dtype=np.float32)

    def vectors_search(
        self,
        *,
        embedder_id: str,
        vector: np.ndarray,
        top_k: int,
        thread_id: str | None = None,
        resource_id: str | None = None,
        threshold: float | None = None,
        vector_store: Any = None,
    ) -> list[VectorHit]:
        query = vector / (np.linalg.norm(vector) or 1.0)
        hits = []
        for message_id, (model, tid, rid, stored) in self.vectors.items():
            if (
                model != embedder_id
                or message_id in self.recall_excluded
                or (thread_id and tid != thread_id)
                or (resource_id and rid != resource_id)
            ):
                continue
            score = float(np.dot(query, stored / (np.linalg.norm(stored) or 1.0)))
            if threshold is None or score >= threshold:
                hits.append(VectorHit(message_id=message_id, thread_id=tid, score=score))
        return sorted(hits, key=lambda h: -h.score)[:top_k]

    def threads_archived(self, *, resource_id: str | None) -> Iterable[str]:
        return set(self.archived)

    def working_memory_get(
        self, *, scope: str, key: str, resource_id: str | None = None
    ) -> WorkingMemoryValue:
        text = self.working_memory.get((scope, key), "")
        pinned = self.pinned.get(key, ()) if scope == "resource" else ()
        return WorkingMemoryValue(text=text, version=1 if text else 0, pinned=tuple(pinned))

    def thread_metadata(self, *, thread_id: str, resource_id: str | None) -> dict[str, Any] | None:
        return self.metadata.get(thread_id, {} if thread_id in self.threads else None)

    def thread_summary(self, *, thread_id: str, resource_id: str | None) -> ThreadSummaryValue | None:
        return self.summaries.get(thread_id)

    def attachment_store(self) -> AttachmentStore:
        if self.attachments is None:
            raise LookupError("This InMemoryStore has no attachment store; pass attachments=...")
        return self.attachments
