"""A suspended turn: what its PendingToolCall keeps (`suspended_state`), and the turn resumed from it
(`Resumption`, run by memproc.turns.sync.turn_resume).

A turn suspends at a call that waits (memproc.turns.tool_steps.Suspend) before anything of it is saved. Its
row keeps the turn's input and its responses so far as stored message content, the suspended step's
calls and the results they have, and the working-memory changes the model made; nothing is in the
thread's memory. The resumed turn starts again from its input (its input processors read memory as
it is now), continues in the step it suspended in with the decided call's result, and saves the whole
turn through the one save path (memproc.turns.commit), which completes the row in the same
transaction.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.utils import timezone

from memproc.events import PendingCall
from memproc.llm.types import ToolCall
from memproc.messages import (
    Message,
    ToolCallPart,
    ToolResultPart,
    message_from_content,
    part_from_json,
    part_to_json,
    thaw,
)
from memproc.processors.turn import PendingWorkingMemory, Turn
from memproc.services.approvals import pending_suspend
from memproc.turns.input import TurnInput
from memproc.turns.plan import TurnPlan

if TYPE_CHECKING:
    from memproc.models import PendingToolCall
    from memproc.turns.tool_steps import Suspend

__all__ = ["Resumption", "resumed_input", "suspended_state", "suspension_save"]


@dataclass
class Resumption:
    """The decided call a resumed turn starts from; `ran`/`result` change once the call ran."""

    pending_id: Any
    tool_call_id: str
    state: str
    responses: list[Message]
    calls: list[ToolCall]
    results: list[ToolResultPart]
    step: int
    steps: int
    usage: dict[str, Any]
    working_memory: list[PendingWorkingMemory] = field(default_factory=list)
    ran: bool = False
    result: Any = None
    is_error: bool = False

    @classmethod
    def of(cls, pending: PendingToolCall) -> Resumption:
        state = pending.turn
        args = pending.effective_arguments
        calls = [
            ToolCall(c["id"], c["name"], args if c["id"] == pending.tool_call_id else c["args"])
            for c in state["calls"]
        ]
        decided = pending.state in ("rejected", "expired")
        return cls(
            pending_id=pending.pk,
            tool_call_id=pending.tool_call_id,
            state=pending.state,
            # What ran is what the history shows: edited arguments replace the model's in its call.
            responses=[_with_args(m, pending.tool_call_id, args) for m in _messages(state["responses"])],
            calls=calls,
            results=[part_from_json(p) for p in state["results"]],  # type: ignore[misc]
            step=int(state["step"]),
            steps=int(state.get("steps", 0)),
            usage=dict(state.get("usage") or {}),
            working_memory=[_working_memory(w) for w in state.get("working_memory", [])],
            ran=decided or pending.ran_at is not None,
            result=pending.result,
            is_error=bool(pending.result_is_error),
        )


def suspended_state(
    turn: Turn,
    *,
    responses: Sequence[Message],
    calls: Sequence[ToolCall],
    results: Sequence[ToolResultPart],
    step: int,
    steps: int,
    usage: dict[str, Any],
    memory_options: dict[str, Any],
) -> dict[str, Any]:
    """The JSON a PendingToolCall keeps of its turn."""
    return {
        "input": [_message_json(m) for m in [*turn.system_input, *turn.input_messages]],
        "client_ids": sorted(turn.client_ids),
        "responses": [_message_json(m) for m in responses],
        "calls": [{"id": c.id, "name": c.name, "args": thaw(c.args)} for c in calls],
        "results": [part_to_json(p) for p in results],
        "step": step,
        "steps": steps,
        "usage": dict(usage),
        "memory_options": dict(memory_options),
        "working_memory": [dataclasses.asdict(w) for w in turn.writes.working_memory],
    }


def suspension_save(
    turn: Turn, suspend: Suspend, *, plan: TurnPlan, steps: int, usage: dict[str, Any], previous_id: Any
) -> PendingCall:
    """Writes the suspended turn's PendingToolCall (nothing else of the turn is saved; `previous_id`
    is the call a resumed turn answered) and returns what the turn's result says waits."""
    tool = suspend.tool
    now = timezone.now()
    timeout = tool.approval_timeout if tool.waits == "approval" else None
    state = suspended_state(
        turn,
        responses=suspend.responses,
        calls=suspend.calls,
        results=suspend.results,
        step=suspend.step,
        steps=steps,
        usage=usage,
        memory_options=dict(plan.memory_options),
    )
    row = pending_suspend(
        fields={
            "agent_id": plan.agent_id,
            "thread_id": turn.thread_id or "",
            "resource_id": turn.resource_id or "",
            "tool_name": suspend.call.name,
            "tool_call_id": suspend.call.id,
            "arguments": thaw(suspend.call.args),
            "kind": tool.waits,
            "permission": tool.approval_permission,
            "turn": state,
            "created_at": now,
            "expires_at": now + dt.timedelta(seconds=timeout) if timeout else None,
        },
        previous_id=previous_id,
    )
    return PendingCall(
        id=str(row.pk),
        tool_name=row.tool_name,
        tool_call_id=row.tool_call_id,
        args=dict(row.arguments),
        kind=row.kind,
        expires_at=row.expires_at,
    )


def resumed_input(pending: PendingToolCall) -> TurnInput:
    """The suspended turn's input, as its start normalised it."""
    state = pending.turn
    return TurnInput(tuple(_messages(state["input"])), frozenset(state.get("client_ids", ())))


def _message_json(message: Message) -> dict[str, Any]:
    return {
        "id": message.id,
        "role": message.role,
        "content": message.to_content(),
        "created_at": message.created_at.isoformat() if message.created_at else None,
    }


def _messages(items: Sequence[dict[str, Any]]) -> list[Message]:
    return [
        message_from_content(
            id=item["id"],
            role=item["role"],
            content=item["content"],
            created_at=datetime.fromisoformat(item["created_at"]) if item.get("created_at") else None,
        )
        for item in items
    ]


def _with_args(message: Message, call_id: str, args: dict[str, Any]) -> Message:
    if not any(c.tool_call_id == call_id for c in message.tool_calls):
        return message
    parts = tuple(
        ToolCallPart(p.tool_call_id, p.tool_name, args)
        if isinstance(p, ToolCallPart) and p.tool_call_id == call_id
        else p
        for p in message.parts
    )
    return message.replace(parts=parts)


def _working_memory(data: dict[str, Any]) -> PendingWorkingMemory:
    data = dict(data)
    if data.get("expected") is not None:
        data["expected"] = tuple(data["expected"])
    data["pinned"] = tuple(data.get("pinned") or ())
    return PendingWorkingMemory(**data)
