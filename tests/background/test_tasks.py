"""The Celery tasks: wire names and payloads, enqueue after commit, idempotency, retries, permanent errors."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from celery import current_app
from celery.signals import task_retry
from django.db import transaction
from django.test import TestCase

from memproc import Agent, Memory, background
from memproc import tasks as memproc_tasks
from memproc.exceptions import ConfigurationError, EmbedderUnavailable
from memproc.models import Message as StoredMessage
from memproc.models import MessageEmbedding, Thread, message_key
from memproc.tasks import (
    TASKS,
    backfill_embeddings_task,
    embed_messages_task,
    generate_title_task,
    purge_resource_task,
)
from memproc.testing import HashEmbedder, ScriptedModel
from tests.background.embedders import FlakyEmbedder

pytestmark = pytest.mark.django_db
R = "user-1"
WIRE_NAMES = {
    "memproc.embed_messages",
    "memproc.generate_title",
    "memproc.backfill_embeddings",
    "memproc.purge_resource",
    "memproc.purge_expired",
    "memproc.outbox_dispatch",
    "memproc.compact_thread",
    "memproc.index_merge",
    "memproc.build_index",
    "memproc.expire_pending_tool_calls",
    "memproc.resume_tool_call",
}


@pytest.fixture
def retries():
    """The retries Celery scheduled, as (task name, the exception retried) pairs."""
    seen: list[tuple[str, BaseException]] = []

    def record(sender=None, request=None, reason=None, **kwargs):
        seen.append((sender.name, getattr(reason, "exc", reason)))

    task_retry.connect(record, weak=False)
    yield seen
    task_retry.disconnect(record)


def vector_count(*, model: str = "hash-64", **filters) -> int:
    return MessageEmbedding.objects.filter(model=model, **filters).count()


def saved_turn(make_agent, model, text="I keep bees in the garden", thread_id="t1", **agent_kwargs):
    """One turn saved with nothing embedded yet (background work recorded, not run)."""
    agent = make_agent(**agent_kwargs)
    model.add("Bees are lovely")
    agent.generate(text, thread_id=thread_id, resource_id=R)
    return list(StoredMessage.objects.filter(thread__public_id=thread_id).values_list("public_id", flat=True))


# --- names, options and what a turn sends ---------------------------------------------------------


def test_every_task_has_its_wire_name_and_an_inline_body():
    tasks = {
        embed_messages_task: memproc_tasks.embed_messages,
        generate_title_task: memproc_tasks.generate_title,
        backfill_embeddings_task: memproc_tasks.backfill_embeddings,
        purge_resource_task: memproc_tasks.purge_resource,
    }
    assert set(TASKS) == WIRE_NAMES
    for task, body in tasks.items():
        assert TASKS[task.name] is body
        assert current_app.tasks[task.name].name == task.name
        assert task.acks_late is True
        assert EmbedderUnavailable in task.autoretry_for
        assert task.max_retries > 0


def test_a_turn_sends_embedding_and_title_tasks_by_wire_name_with_ids_only(make_agent, model, celery_sends):
    agent = make_agent(id="titled", memory=Memory(semantic_recall=True, generate_title=True))
    model.add("Nice to meet you")
    result = agent.generate("Hello, I am Ada", thread_id="t1", resource_id=R)

    assert [name for name, _ in celery_sends.calls] == ["memproc.embed_messages", "memproc.generate_title"]
    assert celery_sends.named("memproc.embed_messages") == [
        {"message_ids": [message_key(R, m.id) for m in result.messages], "agent_id": "titled"}
    ]
    assert celery_sends.named("memproc.generate_title") == [
        {
            "thread_id": "t1",
            "resource_id": R,
            "agent_id": "titled",
            # A model object cannot travel: no model names, the worker needs the agent registered.
            "agent_model": None,
            "title_model": None,
            "instructions": None,
        }
    ]
    assert vector_count() == 0  # the worker's job, not the turn's


def test_only_a_new_thread_gets_a_title_task(make_agent, model, celery_sends):
    agent = make_agent(memory=Memory(semantic_recall=True, generate_title=True))
    model.add("one", "two")
    agent.generate("first", thread_id="t1", resource_id=R)
    agent.generate("second", thread_id="t1", resource_id=R)
    Memory().create_thread(resource_id=R, thread_id="named", title="Chosen by the user")
    model.add("three")
    agent.generate("third", thread_id="named", resource_id=R)
    assert celery_sends.named("memproc.generate_title") == [
        {
            "thread_id": "t1",
            "resource_id": R,
            "agent_id": "bg-agent",
            "agent_model": None,
            "title_model": None,
            "instructions": None,
        }
    ]


def test_without_generate_title_no_title_task(make_agent, model, celery_sends):
    saved_turn(make_agent, model)
    assert celery_sends.named("memproc.generate_title") == []
    assert len(celery_sends.named("memproc.embed_messages")) == 1


def test_tasks_are_sent_only_when_the_turn_commits(model, celery_sends):
    agent = Agent(id="plain", model=model, memory=Memory(semantic_recall=True, generate_title=True))
    model.add("ok")
    with TestCase.captureOnCommitCallbacks(execute=True):
        agent.generate("hello", thread_id="t1", resource_id=R)
        assert celery_sends.calls == []  # still inside the transaction
    assert len(celery_sends.calls) == 2


def test_a_rolled_back_turn_enqueues_nothing(model, celery_sends):
    agent = Agent(id="plain", model=model, memory=Memory(semantic_recall=True, generate_title=True))
    model.add("ok")

    class Rollback(Exception):
        pass

    with TestCase.captureOnCommitCallbacks(execute=True) as callbacks:
        with pytest.raises(Rollback), transaction.atomic():
            agent.generate("hello", thread_id="t1", resource_id=R)
            raise Rollback  # e.g. the view that ran the turn failed afterwards (ATOMIC_REQUESTS)
    assert callbacks == []
    assert celery_sends.calls == []
    assert not StoredMessage.objects.exists()


def test_a_failed_turn_enqueues_nothing(make_agent, model, celery_sends):
    agent = make_agent()
    model.add(RuntimeError("provider exploded"))
    with pytest.raises(RuntimeError):
        agent.generate("hello", thread_id="t1", resource_id=R)
    assert celery_sends.calls == []


# --- embed_messages ---------------------------------------------------------------------------------


def test_running_the_embed_task_twice_stores_each_vector_once(make_agent, model, celery_sends):
    ids = saved_turn(make_agent, model)
    kwargs = celery_sends.named("memproc.embed_messages")[0]

    first = embed_messages_task.apply(kwargs=kwargs)
    second = embed_messages_task.apply(kwargs=kwargs)

    assert first.successful() and first.result == 2
    assert second.successful() and second.result == 0
    assert sorted(MessageEmbedding.objects.values_list("message__public_id", flat=True)) == sorted(ids)


def test_the_embed_task_uses_the_agents_recall_embedder(make_agent, model, celery_sends, registered):
    agent = registered(
        make_agent(id="small", memory=Memory(semantic_recall=True, embedder=HashEmbedder(dimensions=16)))
    )
    saved_turn(make_agent, model, id=agent.id, memory=agent.memory)
    embed_messages_task.apply(kwargs=celery_sends.named("memproc.embed_messages")[0])
    assert vector_count(model="hash-16") == 2
    assert vector_count() == 0


def test_without_agent_or_with_an_unknown_one_the_setting_embedder_is_used(
    make_agent, model, celery_sends, caplog
):
    ids = saved_turn(make_agent, model)  # "bg-agent" is not registered in this process
    with caplog.at_level(logging.WARNING, logger="memproc"):
        embed_messages_task.apply(kwargs={"message_ids": ids[:1], "agent_id": "bg-agent"})
    embed_messages_task.apply(kwargs={"message_ids": ids[1:]})
    assert vector_count() == 2
    assert "no agent 'bg-agent'" in caplog.text


def test_an_embedder_named_in_the_payload_wins(make_agent, model, celery_sends):
    ids = saved_turn(make_agent, model)
    embed_messages_task.apply(
        kwargs={
            "message_ids": ids,
            "agent_id": "bg-agent",
            "embedder": "tests.background.embedders.SwitchEmbedder",
        }
    )
    assert vector_count(model="switch-32") == 2 and vector_count() == 0


def test_a_message_deleted_before_the_task_runs_is_skipped_without_error(make_agent, model, celery_sends):
    saved_turn(make_agent, model)
    kwargs = celery_sends.named("memproc.embed_messages")[0]
    Memory().delete_thread("t1")
    result = embed_messages_task.apply(kwargs=kwargs)
    assert result.successful() and result.result == 0
    assert vector_count() == 0


def test_embedder_outage_the_turn_succeeds_and_the_task_retries_then_succeeds(
    make_agent, model, celery_sends, registered, retries
):
    flaky = FlakyEmbedder()
    agent = registered(make_agent(id="flaky", memory=Memory(semantic_recall=True, embedder=flaky)))
    flaky.fail_next = 10**6  # down during the turn: recall fails, is logged, and the turn goes on
    model.add("Still here")
    result = agent.generate("Is anyone there?", thread_id="t1", resource_id=R)
    assert result.text == "Still here" and result.tripwire is None
    assert StoredMessage.objects.count() == 2

    flaky.fail_next, flaky.calls = 2, []  # the outage ends after two more attempts
    outcome = embed_messages_task.apply(kwargs=celery_sends.named("memproc.embed_messages")[0])

    assert outcome.successful()
    assert len(flaky.calls) == 3
    assert [(name, type(reason)) for name, reason in retries] == [
        ("memproc.embed_messages", EmbedderUnavailable)
    ] * 2
    assert vector_count(model="flaky-64") == 2


def test_an_outage_outlasting_the_retries_fails_the_task(
    make_agent, model, celery_sends, registered, retries
):
    flaky = FlakyEmbedder()
    agent = registered(make_agent(id="flaky", memory=Memory(semantic_recall=True, embedder=flaky)))
    saved_turn(make_agent, model, id=agent.id, memory=agent.memory)
    flaky.fail_next, flaky.calls = 10**6, []

    outcome = embed_messages_task.apply(kwargs=celery_sends.named("memproc.embed_messages")[0])

    assert outcome.failed() and isinstance(outcome.result, EmbedderUnavailable)
    assert len(flaky.calls) == embed_messages_task.max_retries + 1
    assert len(retries) == embed_messages_task.max_retries
    assert vector_count(model="flaky-64") == 0


def test_a_permanent_error_is_logged_once_and_not_retried(
    make_agent, model, celery_sends, registered, retries, caplog
):
    flaky = FlakyEmbedder()
    agent = registered(make_agent(id="flaky", memory=Memory(semantic_recall=True, embedder=flaky)))
    saved_turn(make_agent, model, id=agent.id, memory=agent.memory)
    flaky.fail_next, flaky.calls = 1, []
    flaky.error = ConfigurationError("wrong API key")

    with caplog.at_level(logging.ERROR, logger="memproc"):
        outcome = embed_messages_task.apply(kwargs=celery_sends.named("memproc.embed_messages")[0])

    assert outcome.successful() and outcome.result is None  # dropped, not crashing the worker
    assert len(flaky.calls) == 1 and retries == []
    assert "memproc.embed_messages failed permanently" in caplog.text
    assert "wrong API key" in caplog.text


# --- inline mode ----------------------------------------------------------------------------------------


def test_inline_mode_runs_the_task_bodies_after_commit(make_agent, model, registered, memproc_settings):
    titler = ScriptedModel(["Hi there", "Greetings from Ada"])
    agent = registered(
        make_agent(id="inline", model=titler, memory=Memory(semantic_recall=True, generate_title=True))
    )
    with memproc_settings(BACKGROUND="inline"):
        agent.generate("Hello, I am Ada", thread_id="t1", resource_id=R)
    assert vector_count() == 2
    assert Thread.objects.get(public_id="t1").title == "Greetings from Ada"


def test_the_app_registers_the_inline_task_bodies_when_it_starts():
    """A process that never imports memproc.tasks itself (a web worker) still runs tasks inline."""
    code = "import django; django.setup(); from memproc import background; print(sorted(background.TASKS))"
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=Path(__file__).resolve().parents[2],
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == repr(sorted(WIRE_NAMES))
    assert {name: background.TASKS[name] for name in WIRE_NAMES} == TASKS


def test_inline_mode_names_a_task_nobody_registered():
    with pytest.raises(LookupError, match="memproc.no_such_task"):
        background.run_task_inline("memproc.no_such_task", {})


def test_inline_outage_leaves_the_turn_intact_and_backfill_catches_up(make_agent, model, registered, caplog):
    flaky = FlakyEmbedder()
    agent = registered(make_agent(id="flaky", memory=Memory(semantic_recall=True, embedder=flaky)))
    flaky.fail_next = 10**6
    model.add("Fine")
    with caplog.at_level(logging.ERROR, logger="memproc"):
        result = agent.generate("Remember my bike", thread_id="t1", resource_id=R)
    assert result.text == "Fine" and StoredMessage.objects.count() == 2
    assert vector_count(model="flaky-64") == 0
    assert "memproc.embed_messages failed" in caplog.text

    flaky.fail_next = 0
    outcome = backfill_embeddings_task.apply(kwargs={"agent_id": "flaky"})
    assert outcome.successful() and outcome.result == 2
    assert vector_count(model="flaky-64") == 2


# --- backfill and purge -----------------------------------------------------------------------------------


def test_backfill_embeds_only_what_has_no_vector_and_is_idempotent(make_agent, model, celery_sends):
    saved_turn(make_agent, model, thread_id="t1")
    saved_turn(make_agent, model, text="Another thread entirely", thread_id="t2")
    embed_messages_task.apply(kwargs=celery_sends.named("memproc.embed_messages")[0])  # t1 only
    assert vector_count() == 2

    first = backfill_embeddings_task.apply(kwargs={"batch_size": 1})
    again = backfill_embeddings_task.apply(kwargs={"batch_size": 1})

    assert (first.result, again.result) == (2, 0)
    assert vector_count() == 4


def test_backfill_with_a_dotted_path_embedder(make_agent, model, celery_sends):
    saved_turn(make_agent, model)
    outcome = backfill_embeddings_task.apply(kwargs={"embedder": "tests.background.embedders.SwitchEmbedder"})
    assert outcome.result == 2
    assert vector_count(model="switch-32") == 2


def test_the_purge_task_deletes_the_resource(make_agent, model, celery_sends):
    saved_turn(make_agent, model)
    outcome = purge_resource_task.apply(kwargs={"resource_id": R})
    assert outcome.successful()
    assert outcome.result["messages"] == 2 and outcome.result["threads"] == 1
    assert not StoredMessage.objects.exists()
    again = purge_resource_task.apply(kwargs={"resource_id": R})
    assert sum(again.result.values()) == 0
