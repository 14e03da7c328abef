"""The agent of the worker integration test, built the same way in the test and the worker process."""

from __future__ import annotations

from memproc import Agent, Memory
from memproc.testing import HashEmbedder

WORKER_AGENT_ID = "background-worker-test"


def build_worker_agent() -> Agent:
    return Agent(
        id=WORKER_AGENT_ID,
        instructions="You are a test agent.",
        model="local/echo",
        memory=Memory(
            last_messages=4,
            semantic_recall={"top_k": 3, "message_range": 0},
            embedder=HashEmbedder(dimensions=64),
            generate_title=True,
        ),
    )


APPROVAL_AGENT_ID = "background-approval-test"


def build_approval_agent() -> Agent:
    """An agent whose model always calls the approval-gated `stamp` tool, then answers once it has the
    tool's result: the same in the test process (which suspends the turn) and the worker (which
    resumes it)."""
    import os

    from memproc import tool
    from memproc.llm.types import ModelResponse, ToolCall
    from memproc.testing import ScriptedModel

    class StampModel(ScriptedModel):
        def generate(self, request):  # type: ignore[no-untyped-def]
            self.requests.append(request)
            if request.messages[-1].role == "tool":
                return ModelResponse(text="Stamped.")
            call = ToolCall("stamp-1", "stamp", {"doc": "lease"})
            return ModelResponse(tool_calls=[call], finish_reason="tool_calls")

    @tool(requires_approval=True)
    def stamp(doc: str) -> str:
        """Stamps a document."""
        return f"stamped {doc} in process {os.getpid()}"

    return Agent(
        id=APPROVAL_AGENT_ID,
        instructions="You are a test agent.",
        model=StampModel(),
        memory=Memory(last_messages=4),
        tools=[stamp],
    )
