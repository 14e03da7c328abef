"""The Django implementation of the store protocol processors use (memproc.processors.store)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from memproc import models, selectors
from memproc.messages import Message
from memproc.models import thread_key
from memproc.processors.store import ThreadSummaryValue, VectorHit, WorkingMemoryValue
from memproc.services.attachments.files import DjangoAttachmentStore
from memproc.services.compaction import (
    thread_owner_with_summary,
    thread_summary_get,
)
from memproc.services.recall import query_embed
from memproc.vectors import get_vector_store


class DjangoMemoryStore:
    """Reads through selectors and the configured vector store. Writes go through the turn.

    One per turn. With `summaries` (the turn compacts), the thread's summary comes with the turn's
    first read (`thread_owner`) and is kept for `thread_summary`, so compaction costs the turn no
    query of its own; without, that read skips the summary table.
    """

    def __init__(self, *, summaries: bool = True) -> None:
        self.summaries = summaries
        self._summaries: dict[str, ThreadSummaryValue | None] = {}

    def thread_owner(self, *, thread_id: str, resource_id: str) -> tuple[str, str, int] | None:
        key = thread_key(resource_id, thread_id)
        if not self.summaries:
            return selectors.thread_owner(thread_key=key)
        owner, summary = thread_owner_with_summary(thread_key=key)
        self._summaries[key] = summary
        return owner

    def thread_summary(self, *, thread_id: str, resource_id: str | None) -> ThreadSummaryValue | None:
        key = thread_key(resource_id or "", thread_id)
        if key not in self._summaries:
            self._summaries[key] = thread_summary_get(thread_key=key)
        return self._summaries[key]

    def messages_recent(
        self, *, thread_id: str, resource_id: str | None, limit: int, last_sequence: int | None = None
    ) -> list[Message]:
        return selectors.messages_recent(
            thread_key=thread_key(resource_id or "", thread_id), limit=limit, last_sequence=last_sequence
        )

    def messages_existing(self, *, ids: Iterable[str]) -> dict[str, tuple[str, str]]:
        return selectors.messages_existing(ids=ids)

    def messages_around(
        self, *, message_ids: Sequence[str], before: int, after: int
    ) -> dict[str, list[Message]]:
        return selectors.messages_around(message_ids=message_ids, before=before, after=after)

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
        return get_vector_store(vector_store).search(
            embedder_id=embedder_id,
            vector=vector,
            top_k=top_k,
            thread_id=thread_id,
            resource_id=resource_id,
            threshold=threshold,
        )

    def working_memory_get(
        self, *, scope: str, key: str, resource_id: str | None = None
    ) -> WorkingMemoryValue:
        if scope == "thread":
            key = thread_key(resource_id or "", key)
        text, version = selectors.working_memory_get(scope=scope, key=key)
        return WorkingMemoryValue(text=text, version=version)

    def thread_metadata(self, *, thread_id: str, resource_id: str | None) -> dict[str, Any] | None:
        key = thread_key(resource_id or "", thread_id)
        return models.Thread.objects.filter(pk=key).values_list("metadata", flat=True).first()

    def query_vector(self, *, text: str, embedder: Any) -> np.ndarray:
        return query_embed(text, embedder)

    def attachment_store(self) -> DjangoAttachmentStore:
        return DjangoAttachmentStore()
