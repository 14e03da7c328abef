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
