"""Agents and their registry."""

from __future__ import annotations

from memproc.agents.agent import Agent
from memproc.agents.registry import all_agents, autodiscover, get_agent, register, unregister

__all__ = ["Agent", "all_agents", "autodiscover", "get_agent", "register", "unregister"]
