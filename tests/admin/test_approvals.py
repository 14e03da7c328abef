"""The approval queue in the admin: staff who may decide see the waiting calls and approve or reject
them (the turn resumes, the tool runs once); staff who may not see none of them."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.urls import reverse

from memproc import tool
from memproc.agents import registry
from memproc.llm.types import ModelResponse, ToolCall
from memproc.models import Message, PendingToolCall

pytestmark = pytest.mark.django_db

CHANGELIST = "admin:memproc_pendingtoolcall_changelist"
RUNS: list[str] = []


@tool(requires_approval=True)
def cancel_subscription(plan: str) -> str:
    """Cancels a subscription."""
    RUNS.append(plan)
    return f"cancelled {plan}"


@tool(requires_approval="auth.delete_user")
def remove_account(name: str) -> str:
    """Removes an account."""
    RUNS.append(name)
    return "removed"


@pytest.fixture
def agent(make_agent):
    RUNS.clear()
    agent = registry.register(
        make_agent(id="billing", tools=[cancel_subscription, remove_account]), replace=True
    )
    yield agent
    registry.unregister("billing")


def suspended(agent, model, name="cancel_subscription", args=None, thread="t1"):
    args = args or {"plan": "gold"}
    model.add(ModelResponse(tool_calls=[ToolCall("c-" + thread, name, args)], finish_reason="tool_calls"))
    return agent.generate("Please", thread_id=thread, resource_id="u1").pending


def staff_client(client, name, *perms):
    user = get_user_model().objects.create_user(name, password="pw", is_staff=True)
    for perm in perms:
        app, codename = perm.split(".")
        user.user_permissions.add(Permission.objects.get(content_type__app_label=app, codename=codename))
    client.force_login(user)
    return client


def test_a_decider_sees_the_call_and_approves_it_from_the_list(
    client, agent, model, django_capture_on_commit_callbacks
):
    pending = suspended(agent, model)
    model.add("Done.")
    decider = staff_client(client, "decider", "memproc.change_pendingtoolcall")
    page = decider.get(reverse(CHANGELIST)).content.decode()
    assert "cancel_subscription" in page and "gold" in page
    with django_capture_on_commit_callbacks(execute=True):  # inline: the turn resumes after commit
        response = decider.post(
            reverse(CHANGELIST), {"action": "approve_selected", "_selected_action": [pending.id]}, follow=True
        )
    assert response.status_code == 200 and "approved" in response.content.decode()
    assert RUNS == ["gold"]
    assert PendingToolCall.objects.get().state == "done"
    assert Message.objects.filter(thread__public_id="t1").count() == 4
    # a second approval of the same call does nothing
    decider.post(reverse(CHANGELIST), {"action": "approve_selected", "_selected_action": [pending.id]})
    assert RUNS == ["gold"]
    change = decider.get(reverse("admin:memproc_pendingtoolcall_change", args=[pending.id]))
    assert change.status_code == 200 and "I will" not in change.content.decode()


def test_reject_from_the_list_resumes_the_turn_without_the_tool(
    client, agent, model, django_capture_on_commit_callbacks
):
    pending = suspended(agent, model)
    model.add("Done.")
    decider = staff_client(client, "decider", "memproc.change_pendingtoolcall")
    with django_capture_on_commit_callbacks(execute=True):
        decider.post(reverse(CHANGELIST), {"action": "reject_selected", "_selected_action": [pending.id]})
    row = PendingToolCall.objects.get()
    assert RUNS == [] and row.state == "rejected" and row.reason == "Rejected in the admin"
    assert Message.objects.filter(thread__public_id="t1").count() == 4


def test_staff_without_the_permission_see_no_call_they_may_not_decide(client, agent, model):
    generic = suspended(agent, model)
    special = suspended(agent, model, name="remove_account", args={"name": "ada"}, thread="t2")
    plain = staff_client(client, "plain")
    assert plain.get(reverse(CHANGELIST)).status_code == 403
    assert plain.get(reverse("admin:memproc_pendingtoolcall_change", args=[generic.id])).status_code in (
        302,
        403,
    )
    plain.post(reverse(CHANGELIST), {"action": "approve_selected", "_selected_action": [generic.id]})
    assert RUNS == []

    client.logout()
    decider = staff_client(client, "decider", "memproc.change_pendingtoolcall")
    page = decider.get(reverse(CHANGELIST)).content.decode()
    assert "cancel_subscription" in page and "remove_account" not in page
    assert decider.get(reverse("admin:memproc_pendingtoolcall_change", args=[special.id])).status_code in (
        302,
        403,
        404,
    )
    decider.post(reverse(CHANGELIST), {"action": "approve_selected", "_selected_action": [special.id]})
    assert RUNS == [] and PendingToolCall.objects.get(pk=special.id).state == "pending"

    client.logout()
    account_admin = staff_client(client, "accounts", "auth.delete_user")
    page = account_admin.get(reverse(CHANGELIST)).content.decode()
    assert "remove_account" in page and "cancel_subscription" not in page


def test_with_celery_the_admin_decides_at_once_and_a_worker_resumes_the_turn(
    client, agent, model, settings, django_capture_on_commit_callbacks, monkeypatch
):
    """Approving from the list does not wait for the model: the decision commits, a
    `memproc.resume_tool_call` job goes to the outbox, and the job (run here as a worker would) resumes
    the turn once; a second delivery of the same job does nothing."""
    from memproc import background, tasks
    from memproc.models import OutboxJob

    sent: list[tuple[str, dict]] = []
    monkeypatch.setattr(background, "celery_send_bounded", lambda name, kwargs: sent.append((name, kwargs)))
    settings.MEMPROC = {**getattr(settings, "MEMPROC", {}), "BACKGROUND": "celery"}
    pending = suspended(agent, model)
    model.add("Done.")
    decider = staff_client(client, "decider", "memproc.change_pendingtoolcall")
    with django_capture_on_commit_callbacks(execute=True):
        response = decider.post(
            reverse(CHANGELIST), {"action": "approve_selected", "_selected_action": [pending.id]}, follow=True
        )
    assert "1 call approved; its turn will resume on a Celery worker." in response.content.decode()
    assert RUNS == [] and PendingToolCall.objects.get().state == "approved"
    assert sent == [("memproc.resume_tool_call", {"pending_id": str(pending.id)})]
    assert not OutboxJob.objects.exists()  # sent: nothing left to deliver
    assert tasks.resume_tool_call(**sent[0][1]) is True
    assert RUNS == ["gold"] and PendingToolCall.objects.get().state == "done"
    assert tasks.resume_tool_call(**sent[0][1]) is False  # delivered twice: the tool ran once
    assert RUNS == ["gold"] and Message.objects.filter(thread__public_id="t1").count() == 4


def test_a_decision_whose_job_was_lost_is_resumed_by_the_periodic_task(
    client, agent, model, settings, monkeypatch
):
    import datetime as dt

    from django.utils import timezone

    from memproc import background, tasks

    monkeypatch.setattr(background, "celery_send_bounded", lambda name, kwargs: None)
    settings.MEMPROC = {**getattr(settings, "MEMPROC", {}), "BACKGROUND": "celery"}
    pending = suspended(agent, model)
    model.add("Done.")
    decider = staff_client(client, "decider", "memproc.change_pendingtoolcall")
    decider.post(reverse(CHANGELIST), {"action": "approve_selected", "_selected_action": [pending.id]})
    assert tasks.expire_pending_tool_calls() == {"expired": 0, "resumed": 0}  # within the lease
    PendingToolCall.objects.update(decided_at=timezone.now() - dt.timedelta(minutes=6))
    assert tasks.expire_pending_tool_calls() == {"expired": 0, "resumed": 1}
    assert RUNS == ["gold"] and PendingToolCall.objects.get().state == "done"
