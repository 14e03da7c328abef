"""What a turn is given, resolved once at the edge: its input (`TurnInput`) and its thread
(`ThreadRef`). The HTTP views build both while they validate and check ownership, and the turn reads
neither again, the way DRF's `get_object` hands its object down. Python callers pass plain input and
ids; the turn's start resolves them the same way."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from memproc.messages import Message, MessageInput, to_messages

__all__ = ["ThreadRef", "TurnInput"]


@dataclass(frozen=True)
class TurnInput:
    """A turn's input as messages, normalised once, and the ids among them that the caller chose
    (the others were made up by the normalisation, so they can be in no thread yet)."""

    messages: tuple[Message, ...]
    client_ids: frozenset[str]

    @classmethod
    def of(cls, given: MessageInput | TurnInput) -> TurnInput:
        if isinstance(given, TurnInput):
            return given
        return cls(tuple(to_messages(given)), client_ids_of(given))

    def with_messages(self, messages: Sequence[Message]) -> TurnInput:
        """The same input with its messages changed (uploads attached), its chosen ids kept."""
        return TurnInput(tuple(messages), self.client_ids)


def client_ids_of(given: Any) -> frozenset[str]:
    """The ids the caller wrote: those of `Message` objects and of dicts that carry an `id`."""
    items = given if isinstance(given, list | tuple) else [given]
    return frozenset(
        str(item.id if isinstance(item, Message) else item["id"])
        for item in items
        if isinstance(item, Message) or (isinstance(item, dict) and item.get("id"))
    )


@dataclass(frozen=True)
class ThreadRef:
    """A turn's thread as the caller's request resolved it: whose it is, and, when it exists, what the
    turn's start would otherwise read (title, last sequence, the thread's working memory).

    `last_sequence` is only the starting guess of the save's compare-and-swap, so a turn that another
    request overtook since this was read still saves in order."""

    thread_id: str
    resource_id: str
    exists: bool = False
    title: str = ""
    last_sequence: int | None = None
    working_memory: tuple[str, int] | None = None  # (text, version), when it exists

    @classmethod
    def of(cls, thread: Any, *, thread_id: str, resource_id: str) -> ThreadRef:
        """From a `Thread` row (None: no such thread yet)."""
        if thread is None:
            return cls(thread_id=thread_id, resource_id=resource_id)
        return cls(
            thread_id=thread.public_id,
            resource_id=thread.resource_id,
            exists=True,
            title=thread.title,
            last_sequence=thread.last_sequence,
            working_memory=(thread.working_memory, int(thread.working_memory_version)),
        )
