"""Tool calls that wait for a person: suspend a turn into a PendingToolCall, decide it, resume it.

A decision is a state transition made once: a conditional UPDATE from `pending`, so of ten concurrent
approvals one wins and the others get PendingCallConflict. The winner resumes the turn: the tool runs
(its result is recorded on the row before the turn goes on, so a resume after a crash does not run it
again), the model continues, and the whole turn is saved through the turn's one save path.

Who may decide (`may_decide`): `requires_approval=True` needs the permission
`memproc.change_pendingtoolcall`; a string names the permission; a callable `(user, pending) -> bool`
decides. `actor=None` is trusted code (a management command, a test, the expiry job).

Services never import the turn or the agents (DESIGN §7): resuming a turn needs its agent's plan, so
`memproc.apps` connects a `Resumer` (memproc.agents.approvals) at start-up.

`decisions` suspends, decides and resumes; `client_calls` takes a caller's answer to a client-side
tool. Import either from here.
"""

from memproc.services.approvals.client_calls import (
    client_calls_in_thread,
    pending_client_call,
    pending_in_thread,
    pending_submit_result,
    submit_result,
)
from memproc.services.approvals.decisions import (
    EXPIRED_TEXT,
    REJECTED_TEXT,
    RESUME_LEASE,
    Resumer,
    approve,
    approve_later,
    connect_resumer,
    expire_due,
    may_decide,
    pending_approve,
    pending_complete,
    pending_decidable,
    pending_record_run,
    pending_reject,
    pending_suspend,
    pending_visible,
    reject,
    reject_later,
    resume,
    resume_stalled,
)

__all__ = [
    "EXPIRED_TEXT",
    "REJECTED_TEXT",
    "RESUME_LEASE",
    "Resumer",
    "approve",
    "approve_later",
    "client_calls_in_thread",
    "connect_resumer",
    "expire_due",
    "may_decide",
    "pending_approve",
    "pending_client_call",
    "pending_complete",
    "pending_decidable",
    "pending_in_thread",
    "pending_record_run",
    "pending_reject",
    "pending_submit_result",
    "pending_suspend",
    "pending_visible",
    "reject",
    "reject_later",
    "resume",
    "resume_stalled",
    "submit_result",
]
