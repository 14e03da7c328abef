"""Fixtures for the vector-store tests."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from memproc.models import Message, Resource, Thread, message_key
from memproc.vectors import VectorStore, get_vector_store


@pytest.fixture
def make_messages(db) -> Callable[..., list[Message]]:
    """make_messages(thread_id, count, resource_id="r1") -> saved messages (thread and resource too)."""
    sequences: dict[str, int] = {}

    def make(thread_id: str, count: int, *, resource_id: str = "r1") -> list[Message]:
        resource, _ = Resource.objects.get_or_create(id=resource_id)
        thread, _ = Thread.objects.get_or_create(public_id=thread_id, resource=resource)
        start = sequences.get(thread_id, 0)
        sequences[thread_id] = start + count
        return Message.objects.bulk_create(
            Message(
                id=message_key(resource_id, f"{thread_id}-m{start + i:05d}"),
                public_id=f"{thread_id}-m{start + i:05d}",
                thread=thread,
                resource_id=resource_id,
                role="user",
                content={"parts": []},
                text=f"message {start + i}",
                sequence=start + i + 1,
            )
            for i in range(count)
        )

    return make


@pytest.fixture
def store(db) -> VectorStore:
    """The store memproc picks for the test database: NumPy on SQLite, pgvector on PostgreSQL."""
    return get_vector_store("auto")


@pytest.fixture(autouse=True)
def forget_extension_versions():
    """The pgvector store reads the extension's version once per process; tests change it."""
    from memproc.vectors.pgvector_store import forget_indexes

    forget_indexes()
    yield
    forget_indexes()
