from __future__ import annotations

import pytest

from memproc import Agent, Memory
from memproc.testing import ScriptedModel


@pytest.fixture
def model() -> ScriptedModel:
    return ScriptedModel()


@pytest.fixture
def make_agent(model: ScriptedModel):
    def build(**kwargs) -> Agent:
        kwargs.setdefault("id", "test-agent")
        kwargs.setdefault("instructions", "You are a test agent.")
        kwargs.setdefault("model", model)
        kwargs.setdefault("memory", Memory(last_messages=10))
        return Agent(**kwargs)

    return build
