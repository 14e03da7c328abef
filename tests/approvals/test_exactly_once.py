"""The tool of an approved call runs once: ten concurrent approvals, and a worker killed between the
decision and the save."""

from __future__ import annotations

import datetime as dt
import threading

import pytest
from django.db import connection

from memproc.agents.approvals import AgentResumer
from memproc.exceptions import PendingCallConflict
from memproc.models import Message, PendingToolCall
from memproc.services import approvals
from tests.approvals.conftest import call


class Killed(BaseException):
    """A worker that dies (not an Exception: nothing catches it on the way out)."""


def age_the_claim(pending_id: str) -> None:
    PendingToolCall.objects.filter(pk=pending_id).update(
        claimed_at=PendingToolCall.objects.get(pk=pending_id).claimed_at - dt.timedelta(minutes=10)
    )


@pytest.mark.django_db
def test_a_worker_killed_between_approved_and_ran_resumes_once(approval_agent, model, deletions, monkeypatch):
    model.add(call(), "Deleted.")
    pending = approval_agent.generate("Delete a.txt", thread_id="t1", resource_id="u1").pending

    def die(self, row):
        raise Killed

    with monkeypatch.context() as patch:
        patch.setattr(AgentResumer, "resume", die)
        with pytest.raises(Killed):
            approvals.approve(pending.id)
    row = PendingToolCall.objects.get()
    assert row.state == "approved" and row.ran_at is None and deletions.runs == []
    assert approvals.resume(pending.id) is None  # the dead worker's lease still holds
    assert approvals.resume_stalled() == 0
    age_the_claim(pending.id)
    assert approvals.resume_stalled() == 1
    assert approvals.resume_stalled() == 0
    assert approvals.resume(pending.id) is None
    assert deletions.runs == ["a.txt"]
    assert PendingToolCall.objects.get().state == "done"
    assert Message.objects.filter(thread__public_id="t1").count() == 4


@pytest.mark.django_db
def test_a_worker_killed_after_the_tool_ran_does_not_run_it_again(make_agent, model, deletions, gated_tool):
    from memproc.agents import registry

    class DiesOnce:
        id = "dies-once"
        died = False

        def process_output_result(self, ctx):
            if not DiesOnce.died:
                DiesOnce.died = True
                raise Killed
            return None

    agent = registry.register(
        make_agent(id="approver", tools=[gated_tool], output_processors=[DiesOnce()]), replace=True
    )
    try:
        model.add(call(), "Deleted.", "Deleted.")
        pending = agent.generate("Delete a.txt", thread_id="t1", resource_id="u1").pending
        with pytest.raises(Killed):
            approvals.approve(pending.id)
        row = PendingToolCall.objects.get()
        assert row.ran_at is not None and row.completed_at is None and deletions.runs == ["a.txt"]
        assert not Message.objects.exists()
        age_the_claim(pending.id)
        result = approvals.resume(pending.id)
        assert result.text == "Deleted." and deletions.runs == ["a.txt"]
        assert Message.objects.filter(thread__public_id="t1").count() == 4
    finally:
        registry.unregister("approver")


@pytest.mark.django_db(transaction=True)
def test_ten_concurrent_approvals_run_the_tool_once(approval_agent, model, deletions):
    model.add(call(), "Deleted.")
    pending = approval_agent.generate("Delete a.txt", thread_id="t1", resource_id="u1").pending
    barrier = threading.Barrier(10)
    outcomes: list[object] = []
    lock = threading.Lock()

    def decide() -> None:
        try:
            barrier.wait(timeout=10)
            outcome: object = approvals.approve(pending.id)
        except PendingCallConflict as exc:
            outcome = exc
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            outcome = exc
        finally:
            connection.close()
        with lock:
            outcomes.append(outcome)

    workers = [threading.Thread(target=decide) for _ in range(10)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
    conflicts = [o for o in outcomes if isinstance(o, PendingCallConflict)]
    results = [o for o in outcomes if not isinstance(o, BaseException)]
    assert len(outcomes) == 10
    assert len(results) == 1 and len(conflicts) == 9, outcomes
    assert results[0].text == "Deleted."
    assert deletions.runs == ["a.txt"]
    assert PendingToolCall.objects.get().state == "done"
    assert Message.objects.filter(thread__public_id="t1").count() == 4


@pytest.mark.django_db
def test_the_periodic_task_expires_due_calls_and_resumes_stalled_ones(approval_agent, model, deletions):
    from memproc.tasks import TASKS

    model.add(call(), "Too late.")
    pending = approval_agent.generate("Delete a.txt", thread_id="t1", resource_id="u1").pending
    assert TASKS["memproc.expire_pending_tool_calls"]() == {"expired": 0, "resumed": 0}
    PendingToolCall.objects.filter(pk=pending.id).update(expires_at=PendingToolCall.objects.get().created_at)
    assert TASKS["memproc.expire_pending_tool_calls"]() == {"expired": 1, "resumed": 0}
    assert PendingToolCall.objects.get().state == "expired" and deletions.runs == []
    assert Message.objects.filter(thread__public_id="t1").count() == 4
