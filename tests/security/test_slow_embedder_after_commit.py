"""Inline background embedding runs after the commit and outside the SQLite writers' lock (finding 6
of the third hostile review: six concurrent turns with a 3 s embedder finished at 10.6, 13.6 … 25.6 s)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from django.db import connection

from memproc import Agent, Memory
from memproc.models import MessageEmbedding
from memproc.testing import HashEmbedder

SLOW = 0.5


class SlowSaveEmbedder(HashEmbedder):
    """Slow on every call; counts how many embeddings of saved messages run at once. A turn's first
    call is its recall query (before the turn), its second the embedding of what it saved."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.calls = threading.local()
        self.lock = threading.Lock()
        self.saving = 0
        self.peak = 0

    def embed(self, texts: list[str]) -> list[list[float]]:
        count = getattr(self.calls, "count", 0) + 1
        self.calls.count = count
        if count == 1:
            time.sleep(SLOW)
            return super().embed(texts)
        with self.lock:
            self.saving += 1
            self.peak = max(self.peak, self.saving)
        try:
            time.sleep(SLOW)
            return super().embed(texts)
        finally:
            with self.lock:
                self.saving -= 1


@pytest.mark.django_db(transaction=True)
def test_concurrent_turns_with_a_slow_embedder_overlap_their_embedding(settings: Any) -> None:
    settings.MEMPROC = {**getattr(settings, "MEMPROC", {}), "BACKGROUND": "inline"}
    embedder = SlowSaveEmbedder(dimensions=16)
    agent = Agent(
        id="slow-embedder", model="local/echo", memory=Memory(semantic_recall=True, embedder=embedder)
    )
    errors: list[BaseException] = []

    def turn(index: int) -> None:
        try:
            agent.generate(f"turn {index}", thread_id=f"slow-{index}", resource_id="slow")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    workers = [threading.Thread(target=turn, args=(i,)) for i in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(30)
    assert not errors, errors
    assert MessageEmbedding.objects.count() == 8
    # Inside the writers' lock the saves' embeddings would run one at a time.
    assert embedder.peak > 1
