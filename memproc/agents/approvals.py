"""The agents' side of approvals: the `Resumer` memproc.services.approvals resumes turns through.

A suspended turn names its agent by id; resuming it needs that agent's plan for the call's memory
options, so it lives here, above the turn (DESIGN §7), and memproc.apps connects it at start-up.
"""

from __future__ import annotations

from typing import Any

from memproc.agents.registry import get_agent
from memproc.events import GenerateResult
from memproc.models import PendingToolCall
from memproc.tools import Tool
from memproc.turns.sync import turn_resume

__all__ = ["AgentResumer"]


class AgentResumer:
    """Finds a pending call's tool and resumes its turn, through the agent registry."""

    def tool(self, pending: PendingToolCall) -> Tool | None:
        try:
            agent = get_agent(pending.agent_id)
        except LookupError:
            return None
        return next((t for t in agent.tools if t.name == pending.tool_name), None)

    def resume(self, pending: PendingToolCall) -> GenerateResult:
        agent = get_agent(pending.agent_id)
        memory_options: Any = pending.turn.get("memory_options") or None
        return turn_resume(agent.plan(memory_options=memory_options), pending)
