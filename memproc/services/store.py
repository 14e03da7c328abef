"""The Django implementation of the store protocol processors use (memproc.processors.store)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from memproc import models
from memproc.messages import Message
from memproc.models import message_keys, public_message_id, thread_key
from memproc.processors.store import ThreadSummaryValue, VectorHit, WorkingMemoryValue
from memproc.selectors.messages import messages_around, messages_before, messages_existing, messages_recent
from memproc.selectors.threads import resource_memory_get, thread_read, threads_archived, working_memory_get
from memproc.services.attachments.files import DjangoAttachmentStore
from memproc.services.compaction.summary import summary_value, thread_summary_get
from memproc.services.recall import query_embed
from memproc.vectors import get_vector_store


class DjangoMemoryStore:
    """Reads through selectors and the configured vector store. Writes go through the turn.

    One per turn. The turn's first read (`thread_owner`) also reads the thread's compaction summary
    when the turn compacts (`summaries`), kept for `thread_summary`, and, in the same query as the
    thread, its working memory when the turn uses the thread's (`thread_memory`), kept for
    `working_memory_get`, and its newest `history` messages (the longest history window of the
    turn), kept for `messages_recent`: a turn on a thread with messages reads the thread and its
    window in one query (bench/RESULTS.md, "Against the code before the renovation").
    """

    def __init__(
        self,
        *,
        summaries: bool = True,
        thread_memory: bool = False,
        history: int = 0,
        before: int | None = None,
        hidden: Iterable[str] = (),
    ) -> None:
        # With `before`, the turn replaces the thread's messages from that sequence on (`hidden`,
        # their ids): it reads the thread as it was before them.
        self.summaries = summaries
        self.thread_memory = thread_memory
        self.history = 0 if before is not None else history
        self.before = before
        self.hidden = frozenset(hidden)
        self._summaries: dict[str, ThreadSummaryValue | None] = {}
        self._memories: dict[str, tuple[str, int]] = {}
        # thread key -> (the last sequence it was read at, its newest `history` messages)
        self._recent: dict[str, tuple[int, list[Message]]] = {}

    def thread_owner(self, *, thread_id: str, resource_id: str) -> tuple[str, str, int] | None:
        key = thread_key(resource_id, thread_id)
        read = thread_read(
            thread_key=key, history=self.history, summary=self.summaries, memory=self.thread_memory
        )
        if read.owner is not None and read.recent is not None:
            self._recent[key] = (read.owner[2], read.recent)
        if self.summaries:
            self._summaries[key] = None if read.summary is None else summary_value(read.summary)
        if read.memory is not None:
            self._memories[key] = read.memory
        return read.owner

    def thread_known(self, thread: Any) -> None:
        """A thread the caller read already (a `ThreadRef` that exists): its working memory is kept
        as `thread_owner` would have kept it, and its summary is read when first asked for."""
        if self.thread_memory and thread.working_memory is not None:
            self._memories[thread_key(thread.resource_id, thread.thread_id)] = thread.working_memory

    def thread_summary(self, *, thread_id: str, resource_id: str | None) -> ThreadSummaryValue | None:
        key = thread_key(resource_id or "", thread_id)
        if key not in self._summaries:
            self._summaries[key] = thread_summary_get(thread_key=key)
        return self._summaries[key]

    def messages_recent(
        self, *, thread_id: str, resource_id: str | None, limit: int, last_sequence: int | None = None
    ) -> list[Message]:
        key = thread_key(resource_id or "", thread_id)
        if self.before is not None and self.hidden:
            return messages_before(thread_key=key, before=self.before, limit=limit)
        read = self._recent.get(key)
        # The window the first read brought serves any shorter one of the thread as it was read.
        if read is not None and 0 < limit <= self.history and last_sequence in (None, read[0]):
            return read[1][-limit:]
        return messages_recent(thread_key=key, limit=limit)

    def messages_existing(self, *, ids: Iterable[str], resource_id: str | None) -> dict[str, tuple[str, str]]:
        return {
            message_id: where
            for message_id, where in messages_existing(resource_id=resource_id or "", ids=ids).items()
            if message_id not in self.hidden
        }

    def messages_around(
        self, *, message_ids: Sequence[str], resource_id: str | None, before: int, after: int
    ) -> dict[str, list[Message]]:
        keys = message_keys(resource_id or "", [i for i in message_ids if i not in self.hidden])
        around = messages_around(message_keys=keys, before=before, after=after)
        return {i: [m for m in found if m.id not in self.hidden] for i, found in around.items()}

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
        hits = get_vector_store(vector_store).search(
            embedder_id=embedder_id,
            vector=vector,
            top_k=top_k + len(self.hidden),  # hidden ones may take places in the top k
            thread_id=thread_id,
            resource_id=resource_id,
            threshold=threshold,
        )
        # The vector store names messages by their keys; a turn speaks the ids of its resource.
        hits = [VectorHit(public_message_id(hit.message_id), hit.thread_id, hit.score) for hit in hits]
        return [hit for hit in hits if hit.message_id not in self.hidden][:top_k]

    def threads_archived(self, *, resource_id: str | None) -> Iterable[str]:
        return threads_archived(resource_id=resource_id or "")

    def working_memory_get(
        self, *, scope: str, key: str, resource_id: str | None = None
    ) -> WorkingMemoryValue:
        if scope == "resource":
            text, version, pinned = resource_memory_get(resource_id=key)
            return WorkingMemoryValue(text=text, version=version, pinned=pinned)
        key = thread_key(resource_id or "", key)
        found = self._memories.get(key)
        text, version = found or working_memory_get(scope=scope, key=key)
        return WorkingMemoryValue(text=text, version=version)

    def thread_metadata(self, *, thread_id: str, resource_id: str | None) -> dict[str, Any] | None:
        key = thread_key(resource_id or "", thread_id)
        return models.Thread.objects.filter(pk=key).values_list("metadata", flat=True).first()

    def query_vector(self, *, text: str, embedder: Any) -> np.ndarray:
        return query_embed(text, embedder)

    def attachment_store(self) -> DjangoAttachmentStore:
        return DjangoAttachmentStore()
