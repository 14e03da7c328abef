from __future__ import annotations

import pytest
from django.test import TestCase

from memproc import Agent, Memory
from memproc.testing import ScriptedModel


@pytest.fixture
def model() -> ScriptedModel:
    return ScriptedModel()


@pytest.fixture
def make_agent(model: ScriptedModel):
    """Agents whose turns run their after-commit work (inline embedding) as a real commit would.

    Tests run inside a transaction that never commits, so `on_commit` callbacks are captured and
    executed when each turn returns.
    """

    def build(**kwargs) -> Agent:
        kwargs.setdefault("id", "test-agent")
        kwargs.setdefault("instructions", "You are a test agent.")
        kwargs.setdefault("model", model)
        kwargs.setdefault("memory", Memory(last_messages=10))
        return CommittingAgent(**kwargs)

    return build


class CommittingAgent(Agent):
    def generate(self, *args, **kwargs):
        with TestCase.captureOnCommitCallbacks(execute=True):
            return super().generate(*args, **kwargs)


@pytest.fixture
def committing():
    """A context manager that runs on_commit callbacks of the code inside it on exit."""
    return lambda: TestCase.captureOnCommitCallbacks(execute=True)
