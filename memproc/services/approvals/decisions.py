"""Deciding a waiting tool call: suspend, decide once, resume (see the package docstring)."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any, Protocol

from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from memproc.db import atomic_write, memproc_db
from memproc.exceptions import (
    ConfigurationError,
    PendingCallConflict,
    PendingCallNotFound,
    ToolError,
    ValidationError,
)
from memproc.models import PendingToolCall
from memproc.signals import tool_call_decided

State = PendingToolCall.State

# A resume that took the call this long ago and did not complete is taken to have died (a worker
# killed between the decision and the save); `resume_stalled` takes it again.
RESUME_LEASE = dt.timedelta(minutes=5)

REJECTED_TEXT = "The call was rejected and did not run"
EXPIRED_TEXT = "The call was not approved in time and did not run"


class Resumer(Protocol):
    """What resuming needs from the agents' layer: the tool a call names, and the turn resumed."""

    def tool(self, pending: PendingToolCall) -> Any: ...

    def resume(self, pending: PendingToolCall) -> Any: ...


_resumer: Resumer | None = None


def connect_resumer(resumer: Resumer) -> None:
    """Called by memproc.apps at start-up (and by tests that resume turns of their own)."""
    global _resumer
    _resumer = resumer


def _the_resumer() -> Resumer:
    if _resumer is None:  # pragma: no cover - memproc.apps connects one
        raise ConfigurationError("memproc.services.approvals: no resumer connected (is memproc installed?)")
    return _resumer


# --- the turn's side ------------------------------------------------------------------------------


def pending_suspend(*, fields: Mapping[str, Any], previous_id: Any = None) -> PendingToolCall:
    """Writes the suspended turn's PendingToolCall; a turn resumed from `previous_id` that suspends
    again completes that one in the same transaction."""
    with atomic_write(memproc_db()):
        if previous_id is not None:
            pending_complete(pending_id=previous_id)
        return PendingToolCall.objects.using(memproc_db()).create(**fields)


def pending_record_run(*, pending_id: Any, result: Any, is_error: bool = False) -> None:
    """The approved tool ran: its result is kept, so a resume after a crash reads it instead."""
    PendingToolCall.objects.using(memproc_db()).filter(pk=pending_id, ran_at__isnull=True).update(
        result=result, result_is_error=is_error, ran_at=timezone.now()
    )


def pending_complete(*, pending_id: Any) -> None:
    """The resumed turn ended (saved, blocked, or suspended again): an approved call is done."""
    now = timezone.now()
    rows = PendingToolCall.objects.using(memproc_db()).filter(pk=pending_id, completed_at__isnull=True)
    rows.filter(state=State.APPROVED).update(state=State.DONE, completed_at=now)
    rows.update(completed_at=now)


# --- decisions ------------------------------------------------------------------------------------


def may_decide(user: Any, pending: PendingToolCall) -> bool:
    """Whether `user` may decide `pending` (None: trusted code, always). Inactive users never may."""
    if pending.kind == "client":
        return False  # answered by the caller (submit_result), never decided by a person
    if user is None:
        return True
    if not getattr(user, "is_active", False) or not getattr(user, "is_authenticated", False):
        return False
    if pending.permission:
        return bool(user.has_perm(pending.permission))
    tool = _the_resumer().tool(pending)
    check = getattr(tool, "requires_approval", None)
    return bool(callable(check) and check(user, pending))


def pending_decidable(
    *, user: Any, states: Sequence[str] | None = (State.PENDING,)
) -> QuerySet[PendingToolCall]:
    """The calls (in `states`; None: any) that `user` may decide, oldest first: each distinct
    permission is asked of the user once; a tool's own callable is asked per call."""
    rows = PendingToolCall.objects.using(memproc_db()).filter(kind="approval")
    if states is not None:
        rows = rows.filter(state__in=states)
    if user is None:
        return rows.order_by("created_at")
    if not getattr(user, "is_active", False) or not getattr(user, "is_authenticated", False):
        return rows.none()
    permissions = set(rows.exclude(permission="").values_list("permission", flat=True).distinct())
    granted = [p for p in permissions if user.has_perm(p)]
    by_callable = [row.pk for row in rows.filter(permission="") if may_decide(user, row)]
    return rows.filter(Q(permission__in=granted) | Q(pk__in=by_callable)).order_by("created_at")


def _get(pending_id: Any, **filters: Any) -> PendingToolCall:
    try:
        key = pending_id if isinstance(pending_id, uuid.UUID) else uuid.UUID(str(pending_id))
        return PendingToolCall.objects.using(memproc_db()).get(pk=key, **filters)
    except (PendingToolCall.DoesNotExist, ValueError):
        raise PendingCallNotFound("No such pending tool call") from None


def pending_visible(pending_id: Any, *, user: Any) -> PendingToolCall:
    """The call `pending_id` in any state, if `user` may decide it; else PendingCallNotFound, as
    for a call that does not exist."""
    row = _get(pending_id)
    if not may_decide(user, row):
        raise PendingCallNotFound("No such pending tool call")
    return row


def _decide(
    row: PendingToolCall, *, state: str, actor: Any, claim: bool = True, **fields: Any
) -> PendingToolCall:
    """pending -> `state`, once: the conditional UPDATE is the lock (ten deciders, one winner). With
    `claim` the decider holds the resume (it resumes the turn next); without, `resume` takes it."""
    now = timezone.now()
    using = memproc_db()
    with atomic_write(using):
        won = (
            PendingToolCall.objects.using(using)
            .filter(pk=row.pk, state=State.PENDING)
            .update(
                state=state,
                decided_by_id=getattr(actor, "pk", None),
                decided_at=now,
                claimed_at=now if claim else None,
                **fields,
            )
        )
        if not won:
            raise PendingCallConflict("This tool call is no longer pending")
        decided = PendingToolCall.objects.using(using).get(pk=row.pk)
        if tool_call_decided.receivers:
            transaction.on_commit(
                partial(
                    tool_call_decided.send,
                    sender=PendingToolCall,
                    pending=decided,
                    state=state,
                    actor=actor,
                    agent_id=decided.agent_id,
                    thread_id=decided.thread_id,
                    resource_id=decided.resource_id,
                ),
                using=using,
            )
    return decided


def pending_approve(
    pending_id: Any, *, actor: Any = None, arguments: Mapping[str, Any] | None = None, claim: bool = True
) -> PendingToolCall:
    """Approves the call (with `arguments` in place of the model's, checked against the tool's
    schema: ValidationError) without resuming its turn: the decided row, for a caller that resumes the
    turn itself (a protocol that streams it, memproc.turns.asgi.turn_resume_events). Errors as
    `approve`."""
    row = pending_visible(pending_id, user=actor)
    if row.state != State.PENDING:
        raise PendingCallConflict("This tool call is no longer pending")
    edited = None
    if arguments is not None:
        if not isinstance(arguments, Mapping):
            raise ValidationError("arguments must be an object")
        tool = _the_resumer().tool(row)
        if tool is None:
            raise ValidationError(f"The agent has no tool {row.tool_name!r} any more")
        try:
            tool.validate(arguments)
        except ToolError as exc:
            raise ValidationError(str(exc)) from exc
        edited = dict(arguments)
    return _decide(row, state=State.APPROVED, actor=actor, claim=claim, edited_arguments=edited)


def approve(pending_id: Any, *, actor: Any = None, arguments: Mapping[str, Any] | None = None) -> Any:
    """Approves the call (with `arguments` in place of the model's, checked against the tool's
    schema: ValidationError) and resumes its turn: the turn's GenerateResult. PendingCallNotFound
    when there is no such call or `actor` may not decide it; PendingCallConflict when it is no longer
    pending."""
    decided = pending_approve(pending_id, actor=actor, arguments=arguments)
    return _the_resumer().resume(decided)


def pending_reject(
    pending_id: Any, *, actor: Any = None, reason: str = "", claim: bool = True
) -> PendingToolCall:
    """Rejects the call without resuming its turn: the decided row (see `pending_approve`). Errors as
    `reject`."""
    if not isinstance(reason, str):
        raise ValidationError("reason must be a string")
    row = pending_visible(pending_id, user=actor)
    if row.state != State.PENDING:
        raise PendingCallConflict("This tool call is no longer pending")
    text = f"{REJECTED_TEXT}: {reason}" if reason else REJECTED_TEXT
    return _decide(
        row, state=State.REJECTED, actor=actor, claim=claim, reason=reason, result=text, result_is_error=True
    )


def approve_later(
    pending_id: Any, *, actor: Any = None, arguments: Mapping[str, Any] | None = None
) -> PendingToolCall:
    """Approves the call now and resumes its turn in the background (`memproc.resume_tool_call`, on
    Celery with BACKGROUND="celery", else after this transaction commits): for a decider who need not
    wait for the model, as an admin approving many calls. The decided row; errors as `approve`."""
    decided = pending_approve(pending_id, actor=actor, arguments=arguments, claim=False)
    _resume_later(decided.pk)
    return decided


def reject_later(pending_id: Any, *, actor: Any = None, reason: str = "") -> PendingToolCall:
    """`reject`, with the turn resumed in the background as by `approve_later`."""
    decided = pending_reject(pending_id, actor=actor, reason=reason, claim=False)
    _resume_later(decided.pk)
    return decided


def _resume_later(pending_id: Any) -> None:
    from memproc.background import enqueue

    enqueue(
        "memproc.resume_tool_call", kwargs={"pending_id": str(pending_id)}, inline=partial(resume, pending_id)
    )


def reject(pending_id: Any, *, actor: Any = None, reason: str = "") -> Any:
    """Rejects the call: its turn resumes with a tool result saying so (the tool never runs), and
    the model goes on. The resumed turn's GenerateResult; errors as `approve`."""
    decided = pending_reject(pending_id, actor=actor, reason=reason)
    return _the_resumer().resume(decided)


def expire_due(*, now: dt.datetime | None = None) -> int:
    """Rejects, as expired, every pending call whose time ran out, and resumes their turns (the model
    reads that the call was not approved in time). How many expired."""
    now = now or timezone.now()
    due = PendingToolCall.objects.using(memproc_db()).filter(state=State.PENDING, expires_at__lte=now)
    count = 0
    for row in due:
        try:
            decided = _decide(
                row,
                state=State.EXPIRED,
                actor=None,
                reason="expired",
                result=EXPIRED_TEXT,
                result_is_error=True,
            )
        except PendingCallConflict:
            continue  # decided meanwhile
        count += 1
        _the_resumer().resume(decided)
    return count


def resume(pending_id: Any) -> Any:
    """Resumes a decided call's turn that has not completed, if no live resume holds it (the
    lease): for a worker killed between the decision and the save. The turn's result, or None when
    another resume holds it or it completed."""
    now = timezone.now()
    using = memproc_db()
    lease_over = now - RESUME_LEASE
    taken = (
        PendingToolCall.objects.using(using)
        .filter(pk=pending_id, completed_at__isnull=True)
        .filter(state__in=(State.APPROVED, State.REJECTED, State.EXPIRED))
        .filter(Q(claimed_at__isnull=True) | Q(claimed_at__lte=lease_over))
        .update(claimed_at=now)
    )
    if not taken:
        return None
    return _the_resumer().resume(PendingToolCall.objects.using(using).get(pk=pending_id))


def resume_stalled() -> int:
    """Resumes every decided call whose resume stalled past the lease. How many it resumed."""
    lease_over = timezone.now() - RESUME_LEASE
    stalled = PendingToolCall.objects.using(memproc_db()).filter(
        Q(claimed_at__lte=lease_over) | Q(claimed_at__isnull=True, decided_at__lte=lease_over),
        completed_at__isnull=True,
        state__in=(State.APPROVED, State.REJECTED, State.EXPIRED),
    )
    return sum(resume(pk) is not None for pk in stalled.values_list("pk", flat=True))
