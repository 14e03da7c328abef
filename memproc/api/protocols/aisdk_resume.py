"""A `useChat` request that answers a waiting tool call, at `agents/<id>/chat/` (protocols.aisdk).

When a turn suspends, its stream ends with the call's `tool-input-available` (and, for an approval,
`tool-approval-request` whose `approvalId` is the PendingToolCall's id). `useChat` answers by
resending the conversation with that assistant message last:

* a tool part in state `approval-responded` (`addToolApprovalResponse`): the signed-in user approves
  or rejects the call (with `approval.reason`), through memproc.services.approvals, with its
  permission rules; a user who may not decide it is a 403, an approval id that names no approval-gated
  call of this agent's turns in this chat a 404;
* a tool part in state `output-available` / `output-error` of the message's last step that answers a
  client-side call (`addToolOutput`): that is the call's result (checked against the tool's
  `output_schema`: 400).

A call no longer pending is a 409. The decision is made here, once (a conditional UPDATE); the view
then streams the resumed turn as the continuation of the same assistant message. The message's parts
are not input: the resumed turn starts from what its PendingToolCall kept and saves the whole turn
through the one save path.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rest_framework import serializers
from rest_framework.exceptions import PermissionDenied

from memproc.api.serializers.approvals import RejectSerializer, ToolResultSerializer
from memproc.models import PendingToolCall
from memproc.services import approvals

__all__ = ["TOOL_DONE", "ToolAnswer", "is_tool_part", "tool_answer"]

APPROVAL_RESPONDED = "approval-responded"
TOOL_DONE = ("output-available", "output-error")


@dataclass(frozen=True)
class ToolAnswer:
    """A decided call whose turn the request resumes, and the UI message it continues."""

    pending: PendingToolCall
    message_id: str
    shown: frozenset[str]  # the tool call ids the message holds
    denied: bool


def is_tool_part(part: Mapping[str, Any]) -> bool:
    kind = str(part.get("type", ""))
    return kind == "dynamic-tool" or kind.startswith("tool-")


def tool_answer(
    message: Mapping[str, Any], *, user: Any, agent_id: str, thread_id: str, resource_id: str
) -> ToolAnswer | None:
    """Decides the call that `message` (the request's last message) answers and returns it; None when
    it answers none (an ordinary request). Raises the API errors of the module docstring."""
    if message.get("role") != "assistant":
        return None
    parts = [p for p in message.get("parts") or () if is_tool_part(p)]
    where = {"agent_id": agent_id, "thread_id": thread_id, "resource_id": resource_id}
    responded = [p for p in parts if p.get("state") == APPROVAL_RESPONDED]
    if responded:
        pending, denied = _decide(responded, user=user, where=where)
    else:
        pending = _answer_client_call(_last_step(message), where=where)
        if pending is None:
            return None
        denied = False
    shown = frozenset(str(p.get("toolCallId")) for p in parts)
    return ToolAnswer(pending=pending, message_id=str(message["id"]), shown=shown, denied=denied)


def _decide(
    responded: list[Mapping[str, Any]], *, user: Any, where: dict[str, str]
) -> tuple[PendingToolCall, bool]:
    """Approves or rejects the call of the (first still pending) `approval-responded` part."""
    answers = []
    for part in responded:
        approval = part.get("approval")
        if not (
            isinstance(approval, Mapping)
            and isinstance(approval.get("id"), str)
            and isinstance(approval.get("approved"), bool)
        ):
            raise serializers.ValidationError(
                {"messages": ["An approval-responded tool part needs approval.id and approval.approved."]}
            )
        answers.append((approval, approvals.pending_in_thread(approval["id"], **where)))
    approval, row = next(((a, r) for a, r in answers if r.state == r.State.PENDING), answers[0])
    if not approvals.may_decide(user, row):
        raise PermissionDenied("You may not decide this tool call.")
    if approval["approved"]:
        return approvals.pending_approve(row.pk, actor=user), False
    body = RejectSerializer(data={"reason": approval.get("reason") or ""})
    body.is_valid(raise_exception=True)
    return approvals.pending_reject(row.pk, actor=user, reason=body.validated_data["reason"]), True


def _last_step(message: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    parts = list(message.get("parts") or ())
    starts = [i for i, p in enumerate(parts) if p.get("type") == "step-start"]
    return parts[starts[-1] + 1 :] if starts else parts


def _answer_client_call(step: list[Mapping[str, Any]], *, where: dict[str, str]) -> PendingToolCall | None:
    """Submits the result of the (first still pending) client-side call answered in `step`."""
    done = {str(p.get("toolCallId")): p for p in step if is_tool_part(p) and p.get("state") in TOOL_DONE}
    rows = approvals.client_calls_in_thread(list(done), **where)
    if not rows:
        return None
    row = rows[0]  # the waiting one, if any
    part = done[row.tool_call_id]
    failed = part.get("state") == "output-error"
    result = part.get("errorText") if failed else part.get("output")
    if result is not None:  # a tool that returns nothing answers null (the output_schema may refuse it)
        body = ToolResultSerializer(data={"result": result})
        body.is_valid(raise_exception=True)
        result = body.validated_data["result"]
    return approvals.pending_submit_result(
        row.pk, result=result, resources=[where["resource_id"]], is_error=failed
    )
