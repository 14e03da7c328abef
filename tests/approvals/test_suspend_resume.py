"""Approval-gated tools: a call suspends the turn, saving nothing; a decision resumes it, the tool runs
once, and the whole turn is saved as one."""

from __future__ import annotations

import datetime as dt

import pytest
from django.contrib.auth.models import Permission, User
from django.utils import timezone

from memproc import Tool, tool
from memproc.exceptions import ConfigurationError, PendingCallConflict, PendingCallNotFound, ValidationError
from memproc.models import Message, PendingToolCall, Thread, WorkingMemoryRevision
from memproc.services import approvals
from memproc.signals import tool_call_decided
from tests.approvals.conftest import call

pytestmark = pytest.mark.django_db


def stored(thread_id: str = "t1") -> list[tuple[str, str]]:
    rows = Message.objects.filter(thread__public_id=thread_id).order_by("sequence")
    return [(m.role, m.text) for m in rows]


def stored_parts(thread_id: str = "t1") -> list[dict]:
    rows = Message.objects.filter(thread__public_id=thread_id).order_by("sequence")
    return [p for m in rows for p in m.content["parts"] if p["type"] in ("tool-call", "tool-result")]


def test_a_gated_call_suspends_the_turn_and_saves_nothing(approval_agent, model, deletions):
    model.add(call(), "Deleted.")
    result = approval_agent.generate("Delete a.txt", thread_id="t1", resource_id="u1")
    assert result.suspended and result.tripwire is None and result.messages == []
    assert result.pending.tool_name == "delete_file" and result.pending.args == {"path": "a.txt"}
    assert result.pending.kind == "approval" and result.pending.expires_at is not None
    assert deletions.runs == []
    assert not Thread.objects.exists() and not Message.objects.exists()
    row = PendingToolCall.objects.get()
    assert (row.state, row.permission, row.thread_id, row.resource_id) == (
        "pending",
        "memproc.change_pendingtoolcall",
        "t1",
        "u1",
    )
    assert str(row.pk) == result.pending.id
    assert len(model.requests) == 1  # the model waits with the turn


def test_approve_runs_the_tool_once_and_saves_the_whole_turn(approval_agent, model, deletions):
    model.add(call(), "Deleted.")
    pending = approval_agent.generate("Delete a.txt", thread_id="t1", resource_id="u1").pending
    result = approvals.approve(pending.id)
    assert deletions.runs == ["a.txt"]
    assert result.text == "Deleted." and not result.suspended
    assert stored() == [("user", "Delete a.txt"), ("assistant", ""), ("tool", ""), ("assistant", "Deleted.")]
    assert [m.role for m in result.messages] == ["user", "assistant", "tool", "assistant"]
    parts = stored_parts()
    assert parts[1]["result"] == "deleted a.txt" and not parts[1]["is_error"]
    # the model saw its call's result on the second request
    assert model.requests[1].messages[-1].tool_results[0].result == "deleted a.txt"
    row = PendingToolCall.objects.get()
    assert row.state == "done" and row.completed_at and row.result == "deleted a.txt"
    with pytest.raises(PendingCallConflict):
        approvals.approve(pending.id)
    assert deletions.runs == ["a.txt"]
    assert len(stored()) == 4


def test_reject_saves_a_rejected_tool_result_and_the_model_continues(approval_agent, model, deletions):
    model.add(call(), "I did not delete it.")
    pending = approval_agent.generate("Delete a.txt", thread_id="t1", resource_id="u1").pending
    result = approvals.reject(pending.id, reason="keep it")
    assert deletions.runs == []
    assert result.text == "I did not delete it."
    parts = stored_parts()
    assert parts[1]["is_error"] and parts[1]["result"] == "The call was rejected and did not run: keep it"
    assert "rejected" in model.requests[1].messages[-1].tool_results[0].result
    row = PendingToolCall.objects.get()
    assert (row.state, row.reason) == ("rejected", "keep it") and row.completed_at
    with pytest.raises(PendingCallConflict):
        approvals.approve(pending.id)
    assert deletions.runs == []


def test_approve_with_edited_arguments_runs_them_and_the_history_shows_them(approval_agent, model, deletions):
    model.add(call("a.txt"), "Deleted b.")
    pending = approval_agent.generate("Delete a.txt", thread_id="t1", resource_id="u1").pending
    approvals.approve(pending.id, arguments={"path": "b.txt"})
    assert deletions.runs == ["b.txt"]
    assert stored_parts()[0]["args"] == {"path": "b.txt"}
    row = PendingToolCall.objects.get()
    assert row.arguments == {"path": "a.txt"} and row.edited_arguments == {"path": "b.txt"}


@pytest.mark.parametrize("arguments", [{"path": 3}, {"other": "x"}, {}, ["a"]])
def test_edited_arguments_that_break_the_schema_are_refused_and_the_call_still_waits(
    approval_agent, model, deletions, arguments
):
    model.add(call())
    pending = approval_agent.generate("Delete a.txt", thread_id="t1", resource_id="u1").pending
    with pytest.raises(ValidationError):
        approvals.approve(pending.id, arguments=arguments)
    assert PendingToolCall.objects.get().state == "pending" and deletions.runs == []


def test_expired_calls_are_rejected_and_their_turns_resume(approval_agent, model, deletions):
    model.add(call(), "It was not approved in time.")
    approval_agent.generate("Delete a.txt", thread_id="t1", resource_id="u1")
    assert approvals.expire_due() == 0  # not due yet
    assert approvals.expire_due(now=timezone.now() + dt.timedelta(days=2)) == 1
    row = PendingToolCall.objects.get()
    assert row.state == "expired" and row.completed_at
    assert deletions.runs == []
    assert stored()[-1] == ("assistant", "It was not approved in time.")
    assert "not approved in time" in stored_parts()[1]["result"]
    assert approvals.expire_due(now=timezone.now() + dt.timedelta(days=3)) == 0


def test_a_stream_emits_tool_approval_then_suspended_and_ends(approval_agent, model):
    model.add(call())
    events = list(approval_agent.stream("Delete a.txt", thread_id="t1", resource_id="u1"))
    types = [e.type for e in events]
    assert types[-2:] == ["tool-approval", "suspended"] and "finish" not in types
    assert events[-2].tool_call.name == "delete_file" and events[-2].pending.id == events[-1].pending.id
    assert events[-1].result.suspended
    assert not Message.objects.exists()


def test_a_free_call_beside_a_gated_one_runs_once_across_the_suspension(
    make_agent, model, deletions, gated_tool
):
    from memproc.agents import registry
    from memproc.llm.types import ModelResponse, ToolCall

    reads: list[str] = []

    @tool
    def read_file(path: str) -> str:
        """Reads a file."""
        reads.append(path)
        return "contents"

    agent = registry.register(make_agent(id="approver", tools=[read_file, gated_tool]), replace=True)
    try:
        both = [ToolCall("r1", "read_file", {"path": "a"}), ToolCall("d1", "delete_file", {"path": "a"})]
        model.add(ModelResponse(tool_calls=both, finish_reason="tool_calls"), "Read and deleted.")
        pending = agent.generate("Go", thread_id="t1", resource_id="u1").pending
        assert reads == ["a"] and deletions.runs == []
        approvals.approve(pending.id)
        assert reads == ["a"] and deletions.runs == ["a"]
        results = [p for p in stored_parts() if p["type"] == "tool-result"]
        assert [r["tool_call_id"] for r in results] == ["r1", "d1"]
    finally:
        registry.unregister("approver")


def test_a_second_gated_call_suspends_the_resumed_turn_again(approval_agent, model, deletions):
    model.add(call("a", id="c1"), call("b", id="c2"), "Both deleted.")
    first = approval_agent.generate("Delete a and b", thread_id="t1", resource_id="u1").pending
    again = approvals.approve(first.id)
    assert again.suspended and again.pending.id != first.id and deletions.runs == ["a"]
    assert not Message.objects.exists()
    assert PendingToolCall.objects.get(pk=first.id).state == "done"
    done = approvals.approve(again.pending.id)
    assert done.text == "Both deleted." and deletions.runs == ["a", "b"]
    assert [r for r, _ in stored()] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]


def test_working_memory_written_before_the_suspension_is_saved_with_the_turn(make_agent, model, gated_tool):
    from memproc import Memory
    from memproc.agents import registry
    from memproc.llm.types import ModelResponse, ToolCall

    agent = make_agent(
        id="approver", tools=[gated_tool], memory=Memory(last_messages=10, working_memory=True)
    )
    registry.register(agent, replace=True)
    try:
        update = ToolCall(
            "w1", "updateWorkingMemory", {"memory": "# User Information\n- **First Name**: Ada"}
        )
        model.add(ModelResponse(tool_calls=[update], finish_reason="tool_calls"), call(id="c1"), "Done.")
        pending = agent.generate("I am Ada; delete a", thread_id="t1", resource_id="u1").pending
        assert not WorkingMemoryRevision.objects.exists()
        approvals.approve(pending.id)
        assert "Ada" in agent.memory.get_working_memory(thread_id="t1", resource_id="u1")
    finally:
        registry.unregister("approver")


def test_the_decision_signal_names_the_state_and_the_actor(approval_agent, model, committing):
    seen = []

    def receiver(sender, pending, state, actor, **kwargs):
        seen.append((state, actor, kwargs["thread_id"], kwargs["resource_id"]))

    tool_call_decided.connect(receiver)
    try:
        model.add(call(), "ok")
        pending = approval_agent.generate("Delete", thread_id="t1", resource_id="u1").pending
        with committing():
            approvals.reject(pending.id, reason="no")
    finally:
        tool_call_decided.disconnect(receiver)
    assert seen == [("rejected", None, "t1", "u1")]


# --- who may decide -------------------------------------------------------------------------------


def make_user(name: str, *perms: str, staff: bool = True) -> User:
    user = User.objects.create_user(name, is_staff=staff)
    for perm in perms:
        app, codename = perm.split(".")
        user.user_permissions.add(Permission.objects.get(content_type__app_label=app, codename=codename))
    return User.objects.get(pk=user.pk)  # a fresh permission cache


def test_staff_without_the_permission_can_neither_see_nor_decide(approval_agent, model, deletions):
    model.add(call(), "ok")
    pending = approval_agent.generate("Delete", thread_id="t1", resource_id="u1").pending
    plain = make_user("plain")
    assert list(approvals.pending_decidable(user=plain)) == []
    with pytest.raises(PendingCallNotFound):
        approvals.approve(pending.id, actor=plain)
    with pytest.raises(PendingCallNotFound):
        approvals.reject(pending.id, actor=plain, reason="x")
    decider = make_user("decider", "memproc.change_pendingtoolcall")
    assert [str(p.pk) for p in approvals.pending_decidable(user=decider)] == [pending.id]
    approvals.approve(pending.id, actor=decider)
    row = PendingToolCall.objects.get()
    assert row.decided_by == decider and deletions.runs == ["a.txt"]


def test_a_string_permission_and_a_callable_decide_who_may(make_agent, model):
    from memproc.agents import registry

    @tool(requires_approval="auth.delete_user")
    def remove_user(name: str) -> str:
        """Removes a user."""
        return "removed"

    @tool(requires_approval=lambda user, pending: user.username == pending.resource_id)
    def send_mail(to: str) -> str:
        """Sends mail."""
        return "sent"

    agent = registry.register(make_agent(id="approver", tools=[remove_user, send_mail]), replace=True)
    try:
        model.add(call(name="remove_user", id="x1"), call(name="send_mail", id="x2"))
        first = agent.generate("remove", thread_id="t1", resource_id="owner").pending
        second = agent.generate("mail", thread_id="t2", resource_id="owner").pending
        generic = make_user("generic", "memproc.change_pendingtoolcall")
        admin = make_user("admin", "auth.delete_user")
        owner = make_user("owner", staff=False)
        assert list(approvals.pending_decidable(user=generic)) == []
        assert [str(p.pk) for p in approvals.pending_decidable(user=admin)] == [first.id]
        assert [str(p.pk) for p in approvals.pending_decidable(user=owner)] == [second.id]
    finally:
        registry.unregister("approver")


def test_an_unknown_or_malformed_id_is_not_found(approval_agent):
    for bad in ("nope", "00000000-0000-0000-0000-000000000000", None):
        with pytest.raises(PendingCallNotFound):
            approvals.approve(bad)


# --- the decorator ---------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["nodot", "a.", ".b", "a b.c", 3, 1.5, ["x"]])
def test_requires_approval_refuses_what_is_not_a_permission_or_a_callable(value):
    with pytest.raises(ConfigurationError):

        @tool(requires_approval=value)
        def f(x: int) -> int:
            return x


@pytest.mark.parametrize("timeout", [0, -1, True, "1"])
def test_approval_timeout_must_be_positive(timeout):
    with pytest.raises(ConfigurationError):

        @tool(requires_approval=True, approval_timeout=timeout)
        def f(x: int) -> int:
            return x


def test_a_tool_without_a_function_is_client_side_and_cannot_also_need_approval():
    params = {"type": "object", "properties": {"q": {"type": "string"}}}
    assert Tool("ask", "Asks the user", params, None).waits == "client"
    with pytest.raises(ConfigurationError):
        Tool("ask", "Asks the user", params, None, requires_approval=True)
