"""A turn's first save creates its thread (and its resource) once, whoever races to it, and the turn
endpoints look a thread up: the same rows and objects as the ORM's, in a bounded number of queries."""

from __future__ import annotations

import threading
from datetime import UTC

import pytest
from django.db import connection, transaction

from memproc import Memory, signals
from memproc.models import Resource, Thread, thread_key
from memproc.selectors.threads import thread_get
from memproc.services.threads import thread_ensure

pytestmark = pytest.mark.django_db
R, T = "user-1", "t1"
COLUMNS = [f.attname for f in Thread._meta.concrete_fields]


@pytest.fixture
def created():
    log: list[dict] = []

    def handler(sender, **kwargs):
        log.append(kwargs)

    signals.thread_created.connect(handler, dispatch_uid="test-thread-ensure")
    yield log
    signals.thread_created.disconnect(dispatch_uid="test-thread-ensure")


def _values(thread: Thread) -> dict:
    return {name: getattr(thread, name) for name in COLUMNS}


# --- thread_get -------------------------------------------------------------------------------------


def test_thread_get_builds_the_same_thread_as_the_orm():
    Memory().create_thread(resource_id=R, thread_id=T, title="Plans", metadata={"topic": "trips", "n": 2})
    found = thread_get(thread_id=T, resource_id=R)
    orm = Thread.objects.get(pk=thread_key(R, T))
    assert _values(found) == _values(orm)
    assert found.metadata == {"topic": "trips", "n": 2} and found.title == "Plans"
    assert found.created_at.tzinfo is not None and found.created_at == orm.created_at
    assert found.resource.id == R  # a real model instance: relations work
    found.full_clean()  # a stored row: its own key is no "already exists" error
    found.title = "Renamed"
    found.save()  # an update of the stored row, not a second one
    assert Thread.objects.count() == 1 and Thread.objects.get(pk=thread_key(R, T)).title == "Renamed"


def test_thread_get_is_none_for_a_missing_thread_or_another_resources_thread():
    Memory().create_thread(resource_id=R, thread_id=T)
    assert thread_get(thread_id="other", resource_id=R) is None
    assert thread_get(thread_id=T, resource_id="user-2") is None


def test_thread_get_is_one_query(django_assert_max_num_queries):
    Memory().create_thread(resource_id=R, thread_id=T)
    with django_assert_max_num_queries(1):
        assert thread_get(thread_id=T, resource_id=R).public_id == T


# --- thread_ensure ----------------------------------------------------------------------------------


def test_a_new_thread_and_resource_take_four_queries_and_match_what_is_stored(
    created, django_capture_on_commit_callbacks, django_assert_max_num_queries
):
    # The resource's INSERT that skips an existing row; savepoint, the thread's INSERT, release.
    with django_capture_on_commit_callbacks(execute=True), django_assert_max_num_queries(4):
        thread = thread_ensure(thread_id=T, resource_id=R, agent_id="helper")
    stored = Thread.objects.get(pk=thread_key(R, T))
    assert _values(thread) == _values(stored)
    assert (stored.public_id, stored.resource_id, stored.agent_id) == (T, R, "helper")
    assert (stored.title, stored.metadata, stored.last_sequence, stored.working_memory) == ("", {}, 0, "")
    assert stored.created_at.tzinfo == UTC or stored.created_at.utcoffset().total_seconds() == 0
    resource = Resource.objects.get(pk=R)
    assert resource.working_memory == "" and resource.metadata == {}
    assert [(k["thread"].pk, k["thread_id"], k["resource_id"], k["agent_id"]) for k in created] == [
        (thread_key(R, T), T, R, "helper")
    ]


def test_the_returned_thread_saves_as_an_update():
    thread = thread_ensure(thread_id=T, resource_id=R)
    created_at = Thread.objects.get(pk=thread_key(R, T)).created_at
    thread.title = "Renamed"
    thread.full_clean()  # a stored row: its own key is no "already exists" error
    thread.save()
    stored = Thread.objects.get(pk=thread_key(R, T))
    assert (stored.title, stored.created_at) == ("Renamed", created_at)
    assert Thread.objects.count() == 1


def test_an_existing_resource_keeps_its_working_memory_and_metadata():
    Resource.objects.create(id=R, working_memory="# Name: Ada", metadata={"plan": "pro"})
    thread_ensure(thread_id=T, resource_id=R)
    resource = Resource.objects.get(pk=R)
    assert (resource.working_memory, resource.metadata) == ("# Name: Ada", {"plan": "pro"})


def test_an_existing_thread_is_returned_as_stored_and_not_announced_again(
    created, django_capture_on_commit_callbacks
):
    Memory().create_thread(resource_id=R, thread_id=T, title="Kept", metadata={"a": 1})
    created.clear()
    with django_capture_on_commit_callbacks(execute=True):
        thread = thread_ensure(thread_id=T, resource_id=R, agent_id="late")
    assert (thread.title, thread.metadata, thread.agent_id) == ("Kept", {"a": 1}, "")
    assert created == []
    assert Thread.objects.count() == 1


def test_nothing_is_announced_when_the_callers_transaction_rolls_back(
    created, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        try:
            with transaction.atomic():
                thread_ensure(thread_id=T, resource_id=R)
                raise RuntimeError("the save failed after the thread was created")
        except RuntimeError:
            pass
    assert created == [] and not Thread.objects.exists() and not Resource.objects.exists()


def test_a_first_turn_creates_its_thread_once(make_agent, model, created):
    model.add("hi", "hi again")
    agent = make_agent(memory=Memory(last_messages=5))  # runs each turn's after-commit work
    agent.generate("hello", thread_id=T, resource_id=R)
    agent.generate("again", thread_id=T, resource_id=R)
    assert [k["thread_id"] for k in created] == [T]
    assert Thread.objects.get(pk=thread_key(R, T)).last_sequence == 4


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_racing_first_saves_create_one_thread_and_announce_it_once(created):
    barrier = threading.Barrier(4)
    results: list[Thread] = []
    errors: list[BaseException] = []

    def ensure() -> None:
        try:
            barrier.wait(timeout=10)
            with transaction.atomic():
                results.append(thread_ensure(thread_id=T, resource_id=R))
        except BaseException as exc:  # noqa: BLE001 - asserted below
            errors.append(exc)
        finally:
            connection.close()

    workers = [threading.Thread(target=ensure) for _ in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(30)
    assert not errors
    assert {t.pk for t in results} == {thread_key(R, T)} and len(results) == 4
    assert len(created) == 1
    assert Thread.objects.count() == 1 and Resource.objects.count() == 1
