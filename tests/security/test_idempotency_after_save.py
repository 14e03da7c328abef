"""An Idempotency-Key stays taken once its turn saved, even when the client went away before the
answer (finding 2 of the third hostile review: a client that timed out during a slow save and
retried with the same key had the turn run and saved twice)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connections
from rest_framework.test import APIClient

from memproc import Agent, Memory, models
from memproc.agents import register, unregister
from memproc.testing import HashEmbedder
from tests.api.conftest import API, stream_and_leave

STREAM = API + "agents/slow-save/stream/"


class SaveThenStall(HashEmbedder):
    """Embeds a turn's saved messages slowly (inline, after the commit): `saving` is set when it
    starts, so the client can leave while the turn still works on its save."""

    def __init__(self) -> None:
        super().__init__(dimensions=16)
        self.saving = threading.Event()

    def embed(self, texts: list[str]) -> list[list[float]]:
        if any("answer" in t or "hello" in t for t in texts) and models.Message.objects.exists():
            self.saving.set()
            time.sleep(1)
        return super().embed(texts)


@pytest.fixture
def embedder(settings: Any) -> Iterator[SaveThenStall]:
    settings.MEMPROC = {**getattr(settings, "MEMPROC", {}), "BACKGROUND": "inline"}
    embedder = SaveThenStall()
    register(
        Agent(id="slow-save", model="local/echo", memory=Memory(semantic_recall=True, embedder=embedder)),
        replace=True,
    )
    yield embedder
    unregister("slow-save")


@pytest.mark.django_db(transaction=True)
def test_a_client_that_leaves_during_the_save_gets_a_replay_not_a_second_turn(
    user: Any, embedder: Any, caplog: Any
) -> None:
    key = ((b"idempotency-key", b"leave-during-save"),)
    with caplog.at_level("INFO", logger="memproc"):
        sent = stream_and_leave(
            user, STREAM, {"messages": "hello", "thread_id": "t"}, key, leave_when=embedder.saving
        )
    assert sent[0]["status"] == 200
    assert models.Message.objects.count() == 2  # the turn saved
    assert "nothing saved" not in caplog.text  # the log must not tell operators the opposite

    client = APIClient()
    client.force_authenticate(user)
    again = client.post(
        STREAM,
        {"messages": "hello", "thread_id": "t"},
        format="json",
        HTTP_IDEMPOTENCY_KEY="leave-during-save",
    )
    body = b"".join(again.streaming_content)
    connections.close_all()
    assert again.status_code == 200
    assert again["Idempotent-Replayed"] == "true"
    assert b"event: finish" in body
    assert models.Message.objects.count() == 2  # not run again
