"""The store protocol processors use to reach stored data; the Django one is memproc.services.store."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from memproc.messages import Message


@dataclass(frozen=True, slots=True)
class VectorHit:
    message_id: str
    thread_id: str
    score: float  # cosine similarity, higher is closer


@dataclass(frozen=True, slots=True)
class WorkingMemoryValue:
    text: str
    version: int


class MemoryStore(Protocol):
    def messages_recent(
        self, *, thread_id: str, limit: int, last_sequence: int | None = None
    ) -> list[Message]:
        """The newest `limit` messages of the thread, oldest first (`last_sequence`: a hint)."""
        ...

    def messages_existing(self, *, ids: Iterable[str]) -> dict[str, str]:
        """Which of `ids` are stored: id -> thread id."""
        ...

    def messages_around(
        self, *, message_ids: Sequence[str], before: int, after: int
    ) -> dict[str, list[Message]]:
        """Each message with `before`/`after` neighbours from its own thread, in order, keyed by thread."""
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
    ) -> list[VectorHit]: ...

    def working_memory_get(self, *, scope: str, key: str) -> WorkingMemoryValue: ...

    def thread_metadata(self, *, thread_id: str) -> dict[str, Any] | None: ...
