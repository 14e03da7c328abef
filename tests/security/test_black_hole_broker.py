"""A Celery broker that accepts connections and never answers (finding 1 of the third hostile review):
turns answer within BROKER_SEND_TIMEOUT, what they saved stays saved, their jobs wait in the outbox,
and other turns of the same process are not held behind the stuck send."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery, current_app
from django.db import connection
from rest_framework.test import APIClient

from memproc import Agent, Memory
from memproc.models import Message as StoredMessage
from memproc.models import OutboxJob
from memproc.testing import HashEmbedder
from tests.factories import UserFactory

R = "black-hole-user"


@pytest.fixture
def silent_broker(black_hole: tuple[str, int]) -> Iterator[Celery]:
    host, port = black_hole
    app = Celery("memproc-tests-black-hole", set_as_current=False)
    app.conf.update(
        broker_url=f"redis://{host}:{port}/0", broker_connection_timeout=1, task_ignore_result=True
    )
    from celery import _state

    previous, previous_default = current_app._get_current_object(), _state.default_app
    app.set_current()
    app.set_default()  # the current app is per thread; turns on other threads take the default one
    try:
        yield app
    finally:
        _state.set_default_app(previous_default)
        previous.set_current()


@pytest.fixture
def agent(registered: Any) -> Agent:
    return registered(
        Agent(
            id="black-hole-agent",
            model="local/echo",
            memory=Memory(last_messages=4, semantic_recall=True, embedder=HashEmbedder(dimensions=16)),
        )
    )


@pytest.fixture
def registered() -> Iterator[Any]:
    from memproc.agents import register, unregister

    ids: list[str] = []

    def add(agent: Agent) -> Agent:
        ids.append(agent.id)
        return register(agent, replace=True)

    yield add
    for agent_id in ids:
        unregister(agent_id)


def timed(work: Any) -> tuple[Any, float]:
    started = time.monotonic()
    result = work()
    return result, time.monotonic() - started


@pytest.mark.django_db(transaction=True)
def test_a_turn_answers_within_the_send_timeout_and_its_job_waits_in_the_outbox(
    silent_broker: Celery, agent: Agent, settings: Any
) -> None:
    settings.MEMPROC = {
        **getattr(settings, "MEMPROC", {}),
        "BACKGROUND": "celery",
        "BROKER_SEND_TIMEOUT": 0.5,
    }
    result, elapsed = timed(lambda: agent.generate("I keep bees", thread_id="bees", resource_id=R))

    assert result.text
    assert elapsed < 4, f"the turn waited {elapsed:.1f} s for a broker that never answers"
    assert StoredMessage.objects.filter(thread__public_id="bees").count() == 2
    assert list(OutboxJob.objects.values_list("task", flat=True)) == ["memproc.embed_messages"]


@pytest.mark.django_db(transaction=True)
def test_a_stuck_send_does_not_hold_other_turns_of_the_process(
    silent_broker: Celery, agent: Agent, settings: Any
) -> None:
    """On SQLite the process's writers take turns on a lock; a send after commit must not hold it."""
    settings.MEMPROC = {**getattr(settings, "MEMPROC", {}), "BACKGROUND": "celery", "BROKER_SEND_TIMEOUT": 8}
    errors: list[BaseException] = []

    def first_turn() -> None:
        try:
            agent.generate("hello from the first", thread_id="first", resource_id=R)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    first = threading.Thread(target=first_turn)
    first.start()
    deadline = time.monotonic() + 10
    while not OutboxJob.objects.exists():  # committed: its send is now stuck on the broker
        assert time.monotonic() < deadline, "the first turn never committed"
        time.sleep(0.02)

    plain = Agent(id="no-background-work", model="local/echo", memory=Memory(last_messages=4))
    plain.generate("hello from the second", thread_id="second", resource_id=R)  # saves; sends nothing
    assert first.is_alive(), "the second turn waited for the first one's send"
    first.join(30)
    assert not errors, errors
    assert StoredMessage.objects.filter(thread__public_id__in=["first", "second"]).count() == 4
    assert OutboxJob.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_the_http_api_answers_200_every_time_while_the_broker_is_silent(
    silent_broker: Celery, agent: Agent, settings: Any
) -> None:
    settings.MEMPROC = {
        **getattr(settings, "MEMPROC", {}),
        "BACKGROUND": "celery",
        "BROKER_SEND_TIMEOUT": 0.5,
    }
    client = APIClient()
    client.force_authenticate(UserFactory())
    # More turns than the process has senders: later ones do not wait at all. (Last in this file: its
    # stuck sends end only when the black hole closes.)
    for turn in range(6):
        response, elapsed = timed(
            lambda turn=turn: client.post(
                f"/api/memproc/agents/{agent.id}/generate/",
                {"messages": f"note {turn}", "thread_id": "silent"},
                format="json",
            )
        )
        assert response.status_code == 200, response.content
        assert elapsed < 4
    assert StoredMessage.objects.filter(thread__public_id="silent").count() == 12
    assert OutboxJob.objects.count() == 6  # none lost: each is sent when the broker answers again
