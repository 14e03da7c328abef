"""Answers to client-side tool calls (`Tool(client=True)`): the call waits for the caller's result,
which resumes the turn as the tool's output."""

from __future__ import annotations

import uuid
from collections.abc import Collection
from typing import Any

from django.db.models import QuerySet
from django.utils import timezone

from memproc.db import memproc_db
from memproc.exceptions import PendingCallConflict, PendingCallNotFound, ToolError, ValidationError
from memproc.models import PendingToolCall
from memproc.services.approvals.decisions import _decide, _get, _the_resumer

State = PendingToolCall.State


def pending_client_call(pending_id: Any, *, resources: Collection[str] | None) -> PendingToolCall:
    """A client-side call of one of `resources` (None: any), in any state; else PendingCallNotFound."""
    row = _get(pending_id, kind="client")
    if resources is not None and row.resource_id not in resources:
        raise PendingCallNotFound("No such pending tool call")
    return row


def _thread_calls(*, agent_id: str, thread_id: str, resource_id: str) -> QuerySet[PendingToolCall]:
    return PendingToolCall.objects.using(memproc_db()).filter(
        agent_id=agent_id, resource_id=resource_id, thread_id=thread_id
    )


def pending_in_thread(
    pending_id: Any, *, agent_id: str, thread_id: str, resource_id: str, kind: str = "approval"
) -> PendingToolCall:
    """The call `pending_id` of `kind` (any state) of `agent_id`'s turns in that thread of that
    resource; else PendingCallNotFound, as for a call that does not exist. It says nothing about
    who may decide it (`may_decide`)."""
    rows = _thread_calls(agent_id=agent_id, thread_id=thread_id, resource_id=resource_id)
    try:
        key = pending_id if isinstance(pending_id, uuid.UUID) else uuid.UUID(str(pending_id))
        return rows.get(pk=key, kind=kind)
    except (PendingToolCall.DoesNotExist, ValueError):
        raise PendingCallNotFound("No such pending tool call") from None


def client_calls_in_thread(
    tool_call_ids: Collection[str], *, agent_id: str, thread_id: str, resource_id: str
) -> list[PendingToolCall]:
    """The client-side calls (any state) with those model call ids of `agent_id`'s turns in that
    thread of that resource: the pending ones first, then the newest first (a call id the model
    reused also names older, answered calls; the first row is the one an answer is for)."""
    if not tool_call_ids:
        return []
    rows = _thread_calls(agent_id=agent_id, thread_id=thread_id, resource_id=resource_id)
    calls = rows.filter(kind="client", tool_call_id__in=list(tool_call_ids)).order_by("-created_at")
    return sorted(calls, key=lambda row: row.state != State.PENDING)


def pending_submit_result(
    pending_id: Any, *, result: Any, resources: Collection[str] | None = None, is_error: bool = False
) -> PendingToolCall:
    """Records the caller's answer to a client-side tool call without resuming its turn: the decided
    row (see `pending_approve`). A result (not an error, `is_error`) is checked against the tool's
    `output_schema`, if it has one (ValidationError, and the call still waits). Errors as
    `submit_result`."""
    row = pending_client_call(pending_id, resources=resources)
    if row.state != State.PENDING:
        raise PendingCallConflict("This tool call is no longer pending")
    if not is_error:
        tool = _the_resumer().tool(row)
        try:
            if tool is not None:
                tool.validate_output(result)
        except ToolError as exc:
            raise ValidationError(str(exc)) from exc
    return _decide(
        row,
        state=State.APPROVED,
        actor=None,
        result=result,
        result_is_error=bool(is_error),
        ran_at=timezone.now(),
    )


def submit_result(
    pending_id: Any, *, result: Any, resources: Collection[str] | None = None, is_error: bool = False
) -> Any:
    """The caller's answer to a client-side tool call (of one of `resources`; None: any): the turn
    resumes with it as the tool's result (an error the tool reported, with `is_error`).
    PendingCallNotFound for another resource's call, PendingCallConflict when it is not pending,
    ValidationError for a result the tool's `output_schema` refuses."""
    decided = pending_submit_result(pending_id, result=result, resources=resources, is_error=is_error)
    return _the_resumer().resume(decided)
