"""The embedder and vector store an agent's semantic recall uses, for background embedding and
reindexing."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from memproc.agents.registry import get_agent

if TYPE_CHECKING:
    from memproc.agents.agent import Agent

logger = logging.getLogger(__name__)


def recall_embedder(agent: Agent) -> Any:
    """The embedder of the agent's semantic-recall processor, else its memory's (None: the EMBEDDER
    setting)."""
    _, output_chain = agent.processor_chains()
    for processor in output_chain:
        if getattr(processor, "id", None) == "semantic-recall" and hasattr(processor, "embedder"):
            return processor.embedder
    return agent.memory.embedder if agent.memory is not None else None


def agent_embedder(*, agent_id: str | None) -> Any:
    """The embedder the registered agent `agent_id` recalls with (None: the EMBEDDER setting).

    An agent that is no longer registered (renamed or removed since the work was queued) falls back
    to the setting, with a warning: its messages are still worth embedding for the resource.
    """
    if not agent_id:
        return None
    try:
        agent = get_agent(agent_id)
    except LookupError:
        logger.warning("memproc: no agent %r in this process; embedding with the EMBEDDER setting", agent_id)
        return None
    return recall_embedder(agent)


def recall_vector_store(agent: Agent) -> Any:
    """The vector store of the agent's semantic-recall processor, else its memory's (None: the
    VECTOR_STORE setting)."""
    _, output_chain = agent.processor_chains()
    for processor in output_chain:
        if getattr(processor, "id", None) == "semantic-recall" and hasattr(processor, "vector_store"):
            return processor.vector_store
    return agent.memory.vector_store if agent.memory is not None else None


def agent_vector_store(*, agent_id: str | None) -> Any:
    """The vector store the registered agent `agent_id` recalls from, so a worker writes where the
    agent searches, even when that store is an object (the worker's process registered the agent
    too). None (the VECTOR_STORE setting) when there is no such agent; `agent_embedder` warns."""
    if not agent_id:
        return None
    try:
        agent = get_agent(agent_id)
    except LookupError:
        return None
    return recall_vector_store(agent)
