"""An agent with an approval-gated tool, registered so that decisions can resume its turns."""

from __future__ import annotations

import pytest

from memproc import tool
from memproc.agents import registry
from memproc.llm.types import ModelResponse, ToolCall


class Deletions:
    """Records each run of the gated tool."""

    def __init__(self) -> None:
        self.runs: list[str] = []


@pytest.fixture
def deletions():
    return Deletions()


@pytest.fixture
def gated_tool(deletions):
    @tool(requires_approval=True)
    def delete_file(path: str) -> str:
        """Deletes a file."""
        deletions.runs.append(path)
        return f"deleted {path}"

    return delete_file


@pytest.fixture
def approval_agent(make_agent, gated_tool):
    agent = make_agent(id="approver", tools=[gated_tool])
    registry.register(agent, replace=True)
    yield agent
    registry.unregister(agent.id)


def call(path: str = "a.txt", *, id: str = "call-1", name: str = "delete_file") -> ModelResponse:
    """A model response that calls the gated tool."""
    return ModelResponse(
        text="", tool_calls=[ToolCall(id, name, {"path": path})], usage={}, finish_reason="tool_calls"
    )
