"""TurnPlan: what one call of an agent needs from it, compiled by `Agent.plan()`.

The turn's code (start, engine, loop, tools, commit) and the services it calls take the plan and
never the Agent, so nothing below memproc.agents depends on it (DESIGN §7). The plan is frozen: the
per-call options (memory_options, max_processor_retries, stream_policy, the processor lists) are
applied when it is compiled, and a turn cannot change what its agent is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from memproc.llm import resolve_model
from memproc.llm.types import ChatModel
from memproc.messages import Message
from memproc.tools import Tool
from memproc.turns.stream_policy import StreamPolicy

__all__ = ["DEFAULT_API_ERROR_RETRIES", "Planner", "TurnPlan"]

# Retries after a model error that a `process_api_error` hook repaired, when the agent and the call
# leave max_processor_retries unset: a backstop against a hook that always asks (as Mastra's is).
DEFAULT_API_ERROR_RETRIES = 3


@dataclass(frozen=True, slots=True)
class TurnPlan:
    """An agent compiled for one call: identity, model, instructions, tools, processor chains for
    this call's memory options, limits, and the memory flags the turn's start and commit read."""

    agent_id: str
    agent_name: str
    # "provider/model", a model object, or None for the DEFAULT_MODEL; `model` resolves it.
    model_spec: str | ChatModel | None
    # The model as the turn record and traces name it ("default" for the DEFAULT_MODEL).
    model_id: str
    # The "provider/model" string a worker can resolve (titles); None for a model object.
    model_name: str | None
    instructions: Message | None
    tools: tuple[Tool, ...]
    # Memory processors and the agent's own, in pipeline order (DESIGN §2 rules 1-3).
    input_chain: tuple[Any, ...]
    output_chain: tuple[Any, ...]
    max_steps: int
    max_processor_retries: int
    # The bound of the retries `process_api_error` asks for; they count in the same tally as the
    # output processors' (one turn never retries more than the larger of the two bounds).
    max_api_error_retries: int = DEFAULT_API_ERROR_RETRIES
    # When a streamed turn's text reaches the client (memproc.turns.stream_policy), settled for the
    # call: the agent's or the call's choice, or the strictest its output processors need.
    stream_policy: StreamPolicy = "live"
    # The call has memory: the turn reads its thread and may save.
    has_memory: bool = False
    # Memory(generate_title=True | {"model", "instructions"}); False without memory.
    generate_title: bool | Mapping[str, Any] = False
    # The call's overrides of the Memory options (rule 22), already applied to the chains.
    memory_options: Mapping[str, Any] = field(default_factory=dict)
    # The agent itself, handed unread to processors (`ctx.agent`) and tools (`ToolContext.agent`),
    # whose public contexts name it.
    agent: Any = None

    @property
    def model(self) -> ChatModel:
        """The model adapter, resolved where it is used (the registry keeps one per spec), so a model
        that cannot be built fails at the model call, as it would without a plan."""
        return resolve_model(self.model_spec)


class Planner(Protocol):
    """What the HTTP driver (memproc.turns.asgi) needs of an agent: a plan for one call."""

    def plan(
        self,
        *,
        memory_options: dict[str, Any] | None = None,
        max_processor_retries: int | None = None,
        stream_policy: StreamPolicy | None = None,
        input_processors: Sequence[Any] | None = None,
        output_processors: Sequence[Any] | None = None,
    ) -> TurnPlan: ...
