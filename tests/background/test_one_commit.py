"""Inline embedding: a turn's messages and their vectors are one durable commit on PostgreSQL.

The vectors are computed before the turn's transaction opens (the user message's is the recall
query's) and written inside it. What a commit holds is read from the rows' `xmin` (the id of the
transaction that wrote them) and from the transaction ids the turn consumed: only a transaction that
writes takes one, so their number is the number of durable commits.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from memproc import Agent, Memory, background
from memproc.exceptions import EmbedderUnavailable
from memproc.models import Message as StoredMessage
from memproc.models import MessageEmbedding, OutboxJob
from memproc.testing import HashEmbedder, ScriptedModel

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

R = "one-commit"


class CountingEmbedder(HashEmbedder):
    """A HashEmbedder that records each call's texts and refuses any batch holding `refuse`."""

    def __init__(self) -> None:
        super().__init__(dimensions=64)
        self.id = "counting-64"
        self.calls: list[list[str]] = []
        self.refuse: str | None = None

    def embed(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        if self.refuse is not None and self.refuse in texts:
            raise EmbedderUnavailable("the embeddings endpoint is down")
        return super().embed(texts)


def next_xid() -> int:
    """The transaction id the next writing transaction will take."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint")
        return int(cursor.fetchone()[0])


def writers(table: str, column: str, values: list[str]) -> set[int]:
    """The transaction ids that wrote the rows of `table` whose `column` is in `values`."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT DISTINCT xmin::text::bigint FROM {table} WHERE {column} = ANY(%s)", [values])
        return {row[0] for row in cursor.fetchall()}


@pytest.fixture
def recall_agent(registered: Callable[[Agent], Agent]) -> tuple[Agent, ScriptedModel, CountingEmbedder]:
    embedder = CountingEmbedder()
    model = ScriptedModel()
    memory = Memory(last_messages=10, semantic_recall={"top_k": 3, "message_range": 2}, embedder=embedder)
    agent = registered(Agent(id="one-commit-agent", model=model, memory=memory))
    model.add("first answer")
    agent.generate("I keep bees on the roof", thread_id="t", resource_id=R)  # creates the thread
    return agent, model, embedder


def turn_keys(result: Any) -> list[str]:
    return list(
        StoredMessage.objects.filter(public_id__in=[m.id for m in result.messages]).values_list(
            "id", flat=True
        )
    )


def test_a_recall_turn_commits_its_messages_and_their_embeddings_once(recall_agent, memproc_settings):
    agent, model, embedder = recall_agent
    model.add("noted")
    embedder.calls.clear()
    with memproc_settings(BACKGROUND="inline"):
        first = next_xid()
        result = agent.generate("the hives face south", thread_id="t", resource_id=R)
        used = next_xid() - first

    keys = turn_keys(result)
    assert len(keys) == 2 and MessageEmbedding.objects.filter(message_id__in=keys).count() == 2
    assert used == 1, f"the turn made {used} durable commits"
    assert writers("memproc_message", "id", keys) == writers("memproc_messageembedding", "message_id", keys)
    # The recall query's vector is the stored user message's: its text is embedded once.
    assert sum(texts.count("the hives face south") for texts in embedder.calls) == 1


def test_an_embedder_failure_before_the_save_keeps_the_turn_and_parks_the_embedding(
    recall_agent, memproc_settings
):
    agent, model, embedder = recall_agent
    model.add("noted")
    embedder.refuse = "noted"  # the query embeds; the answer's text does not
    with memproc_settings(BACKGROUND="inline"):
        first = next_xid()
        result = agent.generate("the hives face south", thread_id="t", resource_id=R)
        used = next_xid() - first

    assert result.text == "noted"
    keys = turn_keys(result)
    assert len(keys) == 2 and not MessageEmbedding.objects.filter(message_id__in=keys).exists()
    (job,) = OutboxJob.objects.all()  # the existing policy: parked, retried later
    assert job.task == "memproc.embed_messages" and job.attempts == 1
    assert sorted(job.kwargs["message_ids"]) == sorted(keys)
    assert job.last_error.startswith("EmbedderUnavailable: ")
    assert used == 1, "the parked job is written with the turn, in its one commit"

    embedder.refuse = None
    OutboxJob.objects.update(next_attempt_at=timezone.now() - timedelta(seconds=1))
    with memproc_settings(BACKGROUND="inline"):
        assert background.outbox_dispatch() == {"delivered": 1, "failed": 0, "skipped": 0}
    assert MessageEmbedding.objects.filter(message_id__in=keys).count() == 2


def test_with_celery_the_turn_leaves_embedding_to_the_worker(recall_agent, memproc_settings, celery_sends):
    agent, model, embedder = recall_agent
    model.add("noted")
    embedder.calls.clear()
    with memproc_settings(BACKGROUND="celery"):
        result = agent.generate("the hives face south", thread_id="t", resource_id=R)

    keys = turn_keys(result)
    assert not MessageEmbedding.objects.filter(message_id__in=keys).exists()
    sent = [kwargs for task, kwargs in celery_sends.calls if task == "memproc.embed_messages"]
    assert [sorted(kwargs["message_ids"]) for kwargs in sent] == [sorted(keys)]
    assert all("noted" not in texts for texts in embedder.calls)  # nothing embedded in the turn
