"""A real Celery worker process on a real Redis broker embeds and titles what turns save."""

from __future__ import annotations

import pytest
from django.db.models import Count

from memproc.models import Message as StoredMessage
from memproc.models import MessageEmbedding, Thread
from tests.background.worker_agent import build_worker_agent

pytestmark = [pytest.mark.redis, pytest.mark.django_db(transaction=True)]
R = "worker-user"
TIMEOUT = 20.0


def embedded_ids(thread_ids: list[str]) -> set[str]:
    return set(
        MessageEmbedding.objects.filter(thread_id__in=thread_ids, model="hash-64").values_list(
            "message__public_id", flat=True
        )
    )


def stored_ids(thread_ids: list[str]) -> set[str]:
    return set(
        StoredMessage.objects.filter(thread__public_id__in=thread_ids).values_list("public_id", flat=True)
    )


def test_a_worker_embeds_turns_and_recall_finds_them(
    broker, celery_worker, registered, memproc_settings, wait_for
):
    agent = registered(build_worker_agent())
    with memproc_settings(BACKGROUND="celery"):
        first = agent.generate("I paint old boats teal every summer", thread_id="boats", resource_id=R)
        assert first.tripwire is None
        assert broker.pending() == 2  # embed + title, waiting in Redis: no worker yet

        # While the embeddings are pending, recall simply finds nothing; nothing fails.
        pending = agent.generate("Which colour do I paint boats?", thread_id="pending", resource_id=R)
        assert pending.tripwire is None and "recalled" not in pending.memory
        assert not MessageEmbedding.objects.exists()

        worker = celery_worker()
        threads = ["boats", "pending"]
        wait_for(
            lambda: stored_ids(threads) and embedded_ids(threads) == stored_ids(threads),
            timeout=TIMEOUT, worker=worker, what="the worker to embed both turns",
        )  # fmt: skip
        wait_for(
            lambda: Thread.objects.get(public_id="boats").title,
            timeout=TIMEOUT,
            worker=worker,
            what="a title",
        )
        assert broker.pending() == 0

        later = agent.generate("Which colour do I paint boats?", thread_id="later", resource_id=R)

    recalled = [m["text"] for m in later.memory["recalled"]]
    assert "I paint old boats teal every summer" in recalled
    assert any(m.role == "system" and "Remembered from another conversation" in m.text for m in later.prompt)
    per_message = MessageEmbedding.objects.values("message_id").annotate(n=Count("id")).filter(n__gt=1)
    assert not per_message.exists()  # one vector per message, however often a task ran
    title = Thread.objects.get(public_id="boats").title
    assert 0 < len(title) <= 80 and "boats" in title


def test_an_approval_from_the_admin_resumes_its_turn_on_the_worker(
    broker, celery_worker, registered, memproc_settings, wait_for, client
):
    """With BACKGROUND="celery" the admin's decision returns at once; the worker resumes the turn,
    runs the tool once (in its own process) and saves the whole turn."""
    import os

    from django.contrib.auth import get_user_model
    from django.urls import reverse

    from memproc.models import PendingToolCall
    from tests.background.worker_agent import build_approval_agent

    agent = registered(build_approval_agent())
    with memproc_settings(BACKGROUND="celery"):
        pending = agent.generate("Stamp the lease", thread_id="stamped", resource_id=R).pending
        assert pending is not None and not Thread.objects.filter(public_id="stamped").exists()
        admin = get_user_model().objects.create_superuser("boss", password="pw")
        client.force_login(admin)
        changelist = reverse("admin:memproc_pendingtoolcall_changelist")
        response = client.post(
            changelist, {"action": "approve_selected", "_selected_action": [pending.id]}, follow=True
        )
        assert "its turn will resume on a Celery worker" in response.content.decode()
        assert PendingToolCall.objects.get().state == "approved"
        worker = celery_worker()
        wait_for(
            lambda: PendingToolCall.objects.get().state == "done",
            timeout=TIMEOUT, worker=worker, what="the worker to resume the approved turn",
        )  # fmt: skip
    row = PendingToolCall.objects.get()
    assert (
        row.result.startswith("stamped lease in process ")
        and row.result != f"stamped lease in process {os.getpid()}"
    )
    texts = list(
        StoredMessage.objects.filter(thread__public_id="stamped")
        .order_by("sequence")
        .values_list("role", "text")
    )
    assert texts == [("user", "Stamp the lease"), ("assistant", ""), ("tool", ""), ("assistant", "Stamped.")]
