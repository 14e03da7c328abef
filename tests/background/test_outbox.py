"""The outbox: a committed turn never fails because its background jobs cannot be sent, and nothing
is lost; undelivered jobs are sent again later (command, beat task, the next inline success)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from celery import Celery, current_app
from django.core.management import call_command
from django.db import DatabaseError
from django.utils import timezone
from rest_framework.test import APIClient

from memproc import Agent, Memory, background
from memproc.models import Message as StoredMessage
from memproc.models import MessageEmbedding, OutboxJob, message_key
from tests.background.embedders import FlakyEmbedder
from tests.background.worker_agent import WORKER_AGENT_ID, build_worker_agent
from tests.factories import UserFactory

R = "outbox-user"
CLOSED_PORT_BROKER = "redis://127.0.0.1:1/0"  # nothing listens there: every publish is refused


@pytest.fixture
def broker_down() -> Iterator[Celery]:
    """The current Celery app publishes to a port where no broker listens (a broker outage)."""
    app = Celery("memproc-tests-broker-down", set_as_current=False)
    app.conf.update(broker_url=CLOSED_PORT_BROKER, broker_connection_timeout=0.5, task_ignore_result=True)
    previous = current_app._get_current_object()
    app.set_current()
    try:
        yield app
    finally:
        previous.set_current()
        app.close()


def make_due() -> None:
    OutboxJob.objects.update(next_attempt_at=timezone.now() - timedelta(seconds=1))


# --- Celery: the broker is down while a turn commits --------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_broker_down_the_turn_commits_once_and_its_jobs_wait_in_the_outbox(
    broker_down, registered, memproc_settings
):
    agent = registered(build_worker_agent())
    with memproc_settings(BACKGROUND="celery"):
        started = time.monotonic()
        result = agent.generate("I keep bees", thread_id="bees", resource_id=R)
        elapsed = time.monotonic() - started

    assert result.tripwire is None and result.text
    assert StoredMessage.objects.filter(thread__public_id="bees").count() == 2
    jobs = list(OutboxJob.objects.order_by("task"))
    assert [job.task for job in jobs] == ["memproc.embed_messages", "memproc.generate_title"]
    assert all(job.attempts == 1 and job.last_error for job in jobs)
    assert all(job.next_attempt_at > timezone.now() for job in jobs)  # backed off, not hammered
    assert jobs[0].kwargs == {
        "message_ids": [message_key(R, m.id) for m in result.messages],
        "agent_id": WORKER_AGENT_ID,
    }
    assert elapsed < 10, "a broker outage must not hold the caller for long"


@pytest.mark.django_db(transaction=True)
def test_broker_down_the_http_api_answers_200_and_a_retry_is_not_needed(
    broker_down, registered, memproc_settings
):
    registered(build_worker_agent())
    user = UserFactory()
    client = APIClient()
    client.force_authenticate(user)
    with memproc_settings(BACKGROUND="celery"):
        response = client.post(
            f"/api/memproc/agents/{WORKER_AGENT_ID}/generate/",
            {"messages": "Remember that I keep bees", "thread_id": "api-bees"},
            format="json",
        )
    assert response.status_code == 200, response.content
    assert StoredMessage.objects.filter(thread__public_id="api-bees").count() == 2
    assert OutboxJob.objects.count() == 2


@pytest.mark.django_db(transaction=True)
def test_a_stream_with_the_broker_down_ends_normally(broker_down, registered, memproc_settings):
    agent = registered(build_worker_agent())
    with memproc_settings(BACKGROUND="celery"):
        events = list(agent.stream("Remember the bees", thread_id="streamed", resource_id=R))
    assert events[-1].type == "finish"
    assert not [e for e in events if e.type == "error"]
    assert StoredMessage.objects.filter(thread__public_id="streamed").count() == 2
    assert OutboxJob.objects.count() == 2


@pytest.mark.django_db(transaction=True)
def test_when_the_broker_is_back_the_command_sends_the_jobs_and_a_worker_runs_them(
    broker_down, broker, celery_worker, registered, memproc_settings, wait_for
):
    agent = registered(build_worker_agent())
    with memproc_settings(BACKGROUND="celery"):
        broker_down.set_current()
        result = agent.generate("I paint old boats teal", thread_id="boats", resource_id=R)
        assert OutboxJob.objects.count() == 2

        broker.app.set_current()  # the broker is back
        make_due()
        call_command("memproc_outbox", stdout=_Sink())
        assert OutboxJob.objects.count() == 0
        assert broker.pending() == 2

        worker = celery_worker()
        ids = {m.id for m in result.messages}
        wait_for(
            lambda: set(MessageEmbedding.objects.values_list("message__public_id", flat=True)) >= ids,
            timeout=30,
            worker=worker,
            what="the worker to embed the turn sent from the outbox",
        )
    # Sent again (the delete of a delivered job was lost, say): the idempotent task adds nothing.
    assert MessageEmbedding.objects.filter(message__public_id__in=ids).count() == len(ids)


@pytest.mark.django_db(transaction=True)
def test_a_sent_job_leaves_no_row_and_a_rolled_back_turn_writes_none(celery_sends, make_agent, model):
    agent = make_agent()
    model.add("ok")
    agent.generate("hello", thread_id="t1", resource_id=R)
    assert len(celery_sends.calls) == 1
    assert OutboxJob.objects.count() == 0


def test_jobs_wait_in_the_outbox_until_the_turn_commits(celery_sends, model, db):
    from django.test import TestCase

    agent = Agent(id="plain", model=model, memory=Memory(semantic_recall=True))
    model.add("ok")
    with TestCase.captureOnCommitCallbacks(execute=True):
        agent.generate("hello", thread_id="t1", resource_id=R)
        assert OutboxJob.objects.count() == 1  # written in the turn's own transaction
        assert celery_sends.calls == []
    assert OutboxJob.objects.count() == 0
    assert len(celery_sends.calls) == 1


# --- the dispatcher ---------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_dispatcher_leaves_a_job_whose_send_is_still_in_flight(celery_sends):
    OutboxJob.objects.create(
        task="memproc.purge_expired", kwargs={}, next_attempt_at=timezone.now() + timedelta(seconds=30)
    )
    assert background.outbox_dispatch() == {"delivered": 0, "failed": 0, "skipped": 0}
    make_due()
    assert background.outbox_dispatch()["delivered"] == 1
    assert celery_sends.calls == [("memproc.purge_expired", {})]
    assert OutboxJob.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_a_job_another_dispatcher_claimed_is_skipped(celery_sends, monkeypatch):
    job = OutboxJob.objects.create(task="memproc.purge_expired", kwargs={}, next_attempt_at=timezone.now())
    real_filter = OutboxJob.objects.filter

    def racing_filter(*args: Any, **kwargs: Any) -> Any:
        if "next_attempt_at" in kwargs and "pk" in kwargs:  # the claim: someone else claimed it first
            OutboxJob.objects.all().update(next_attempt_at=timezone.now() + timedelta(minutes=5))
        return real_filter(*args, **kwargs)

    monkeypatch.setattr(OutboxJob.objects, "filter", racing_filter)
    assert background.outbox_dispatch() == {"delivered": 0, "failed": 0, "skipped": 1}
    assert celery_sends.calls == []
    assert OutboxJob.objects.filter(pk=job.pk).exists()


@pytest.mark.django_db(transaction=True)
def test_failures_back_off_and_a_job_is_parked_after_max_attempts(broker_down, memproc_settings):
    with memproc_settings(BACKGROUND="celery"):
        job = OutboxJob.objects.create(
            task="memproc.purge_expired", kwargs={}, next_attempt_at=timezone.now()
        )
        delays = []
        for attempt in range(1, 4):
            make_due()
            assert background.outbox_dispatch()["failed"] == 1
            job.refresh_from_db()
            assert job.attempts == attempt
            delays.append((job.next_attempt_at - timezone.now()).total_seconds())
        assert delays[0] < delays[1] < delays[2]

        OutboxJob.objects.update(attempts=background.MAX_ATTEMPTS)
        make_due()
        assert background.outbox_dispatch() == {"delivered": 0, "failed": 0, "skipped": 0}
        assert background.outbox_dispatch(include_parked=True)["failed"] == 1


@pytest.mark.django_db(transaction=True)
def test_the_command_lists_what_waits(celery_sends):
    OutboxJob.objects.create(task="memproc.generate_title", kwargs={"thread_id": "t", "agent_id": "a"})
    out = _Sink()
    call_command("memproc_outbox", "--list", stdout=out)
    assert "memproc.generate_title: 1 waiting" in out.text
    assert OutboxJob.objects.count() == 1
    out = _Sink()
    call_command("memproc_outbox", stdout=out)
    assert "Delivered 1" in out.text
    assert OutboxJob.objects.count() == 0


def test_the_beat_task_dispatches(celery_sends, db):
    from memproc.tasks import outbox_dispatch_task

    OutboxJob.objects.create(task="memproc.purge_expired", kwargs={}, next_attempt_at=timezone.now())
    assert outbox_dispatch_task.apply(kwargs={"limit": 10}).get() == {
        "delivered": 1,
        "failed": 0,
        "skipped": 0,
    }


# --- inline: a failed embedding is retried, not dropped ---------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_an_inline_embedding_that_fails_is_parked_and_retried(registered):
    embedder = FlakyEmbedder(dimensions=64, id="hash-64")
    agent = registered(
        Agent(id="inline-flaky", model="local/echo", memory=Memory(semantic_recall=True, embedder=embedder))
    )
    embedder.fail_next = 2  # the recall query, then the turn's embedding
    result = agent.generate("I keep bees", thread_id="bees", resource_id=R)
    assert result.text and StoredMessage.objects.filter(thread__public_id="bees").count() == 2
    assert MessageEmbedding.objects.count() == 0
    job = OutboxJob.objects.get()
    assert job.task == "memproc.embed_messages" and "EmbedderUnavailable" in job.last_error

    make_due()  # the next turn that runs background work successfully sweeps the due job
    agent.generate("and wasps", thread_id="other", resource_id=R)
    ids = {m.id for m in result.messages}
    assert ids <= set(MessageEmbedding.objects.values_list("message__public_id", flat=True))
    assert OutboxJob.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_inline_jobs_leave_no_outbox_row_when_they_succeed(make_agent, model):
    agent = make_agent()
    model.add("one")
    agent.generate("hello", thread_id="t1", resource_id=R)
    assert OutboxJob.objects.count() == 0


class _Sink:
    def __init__(self) -> None:
        self.text = ""

    def write(self, value: str, *args: Any, **kwargs: Any) -> None:
        self.text += value

    def flush(self) -> None:
        pass


def test_operators_see_the_outbox_in_the_admin_and_can_send_a_parked_job(celery_sends, db):
    from django.test import Client

    admin_user = UserFactory(is_staff=True, is_superuser=True)
    job = OutboxJob.objects.create(
        task="memproc.purge_expired",
        kwargs={},
        attempts=background.MAX_ATTEMPTS,
        last_error="OperationalError: down",
    )
    client = Client()
    client.force_login(admin_user)
    page = client.get("/admin/memproc/outboxjob/")
    assert page.status_code == 200 and b"memproc.purge_expired" in page.content
    response = client.post(
        "/admin/memproc/outboxjob/", {"action": "send_now", "_selected_action": [job.pk]}, follow=True
    )
    assert response.status_code == 200 and b"Delivered 1" in response.content
    assert celery_sends.calls == [("memproc.purge_expired", {})]
    assert not OutboxJob.objects.exists()


@pytest.mark.django_db
def test_a_late_send_never_touches_a_newer_job_that_took_its_id(monkeypatch, settings):
    """A send stuck on a broker may return after the dispatcher has delivered and deleted its job, and
    after SQLite has given that id to a new job: neither its success nor its failure may delete or
    reschedule the new job (which would then never be sent)."""
    settings.MEMPROC = {**getattr(settings, "MEMPROC", {}), "BACKGROUND": "celery"}
    sends: list[str] = []
    monkeypatch.setattr(background, "celery_send_bounded", lambda name, kwargs: sends.append(name))
    old = OutboxJob.objects.create(task="memproc.embed_messages", kwargs={"ids": ["a"]})
    stale = background.job_ref(old)
    old.delete()  # delivered by the dispatcher meanwhile
    newer = OutboxJob.objects.create(
        id=stale[0], task="memproc.embed_messages", kwargs={"ids": ["b"]}, next_attempt_at=timezone.now()
    )
    background._send_after_commit(stale, "memproc.embed_messages", {"ids": ["a"]})
    assert sends == ["memproc.embed_messages"]
    newer.refresh_from_db()  # still there, untouched
    assert (newer.attempts, newer.last_error) == (0, "")

    def broken(name: str, kwargs: dict[str, Any]) -> None:
        raise ConnectionError("broker went away")

    monkeypatch.setattr(background, "celery_send_bounded", broken)
    background._send_after_commit(stale, "memproc.embed_messages", {"ids": ["a"]})
    newer.refresh_from_db()
    assert (newer.attempts, newer.last_error) == (0, "")
    assert background.outbox_dispatch()["failed"] == 1  # the newer job is still due, and tried


# --- Memory.save_messages outside a turn ----------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_saved_messages_and_their_embedding_job_are_one_commit(memproc_settings, monkeypatch):
    """Messages saved outside a turn and the outbox row of their embedding commit together: when the
    job cannot be written, nothing is saved (a retry does not store the messages twice, and no stored
    message is left that nothing will embed)."""

    def cannot_write(**kwargs: Any) -> Any:
        raise DatabaseError("disk I/O error")

    monkeypatch.setattr(OutboxJob.objects, "create", cannot_write)
    with memproc_settings(BACKGROUND="celery"), pytest.raises(DatabaseError):
        Memory(semantic_recall=True).save_messages(["one", "two"], thread_id="saved", resource_id=R)
    assert not StoredMessage.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_saved_messages_wait_in_the_outbox_for_their_embedding_while_the_broker_is_down(
    broker_down, memproc_settings
):
    with memproc_settings(BACKGROUND="celery"):
        saved = Memory(semantic_recall=True).save_messages(["one", "two"], thread_id="saved", resource_id=R)
    assert StoredMessage.objects.filter(thread__public_id="saved").count() == 2
    job = OutboxJob.objects.get()
    assert job.task == "memproc.embed_messages"
    assert sorted(job.kwargs["message_ids"]) == sorted(message_key(R, m.id) for m in saved)
