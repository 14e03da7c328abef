"""Agents and their registry."""

from __future__ import annotations

from typing import Any

from memproc.agents.registry import all_agents, autodiscover, get_agent, register, unregister

__all__ = ["Agent", "all_agents", "autodiscover", "get_agent", "register", "unregister"]


def __getattr__(name: str) -> Any:
    if name == "Agent":
        from memproc.agents.agent import Agent

        return Agent
    raise AttributeError(name)
