"""The agent registry: `agents.py` modules of installed apps register agents at start-up."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from django.utils.module_loading import autodiscover_modules

from memproc.exceptions import ConfigurationError

if TYPE_CHECKING:
    from memproc.agents.agent import Agent

_agents: dict[str, Agent] = {}
_lock = threading.Lock()


def register(agent: Agent, *, replace: bool = False) -> Agent:
    """Registers `agent` under its id; registering a second agent with one id is an error."""
    with _lock:
        existing = _agents.get(agent.id)
        if existing is not None and existing is not agent and not replace:
            raise ConfigurationError(f"An agent with id {agent.id!r} is already registered")
        _agents[agent.id] = agent
    return agent


def unregister(agent_id: str) -> None:
    with _lock:
        _agents.pop(agent_id, None)


def get_agent(agent_id: str) -> Agent:
    try:
        return _agents[agent_id]
    except KeyError:
        raise LookupError(f"No agent is registered with id {agent_id!r}") from None


def all_agents() -> list[Agent]:
    return sorted(_agents.values(), key=lambda a: a.id)


def autodiscover() -> None:
    autodiscover_modules("agents")
