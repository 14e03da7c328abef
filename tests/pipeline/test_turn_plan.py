"""Agent.plan: what a turn reads of its agent, compiled once per call with that call's overrides."""

from __future__ import annotations

import dataclasses

import pytest

from memproc import Agent, Memory, tool
from memproc.exceptions import ValidationError
from memproc.processors.base import processor_id


@tool
def clock() -> str:
    """The time."""
    return "noon"


def agent(**kwargs):
    kwargs.setdefault("memory", Memory(last_messages=5, generate_title=True))
    return Agent(
        id="planned", name="Planned", instructions="Be brief.", model="local/echo", tools=[clock], **kwargs
    )


def test_the_plan_carries_what_the_turn_reads_of_its_agent():
    planned = agent(max_processor_retries=2, max_steps=3)
    plan = planned.plan()
    assert (plan.agent_id, plan.agent_name, plan.model_id, plan.model_name) == (
        "planned",
        "Planned",
        "local/echo",
        "local/echo",
    )
    assert plan.instructions is not None and plan.instructions.text == "Be brief."
    assert [t.name for t in plan.tools] == ["clock"]
    assert (plan.max_steps, plan.max_processor_retries) == (3, 2)
    assert plan.has_memory and plan.generate_title is True
    assert plan.agent is planned  # handed to processors and tools as their context's agent
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.max_steps = 10  # type: ignore[misc]


def test_a_calls_memory_options_shape_its_chains_only():
    planned = agent()
    plain = planned.plan()
    without_history = planned.plan(memory_options={"last_messages": False})
    assert "message-history" in [processor_id(p) for p in plain.input_chain]
    assert "message-history" not in [processor_id(p) for p in without_history.input_chain]
    assert without_history.memory_options == {"last_messages": False}
    assert "message-history" in [processor_id(p) for p in planned.plan().input_chain]


def test_an_agent_without_memory_or_instructions_plans_none():
    plan = Agent(id="bare").plan()
    assert (plan.has_memory, plan.generate_title, plan.instructions) == (False, False, None)
    assert plan.model_name is None and plan.model_id == "default"


@pytest.mark.parametrize("retries", [-1, True, "2"])
def test_bad_per_call_retries_are_refused_when_planning(retries):
    with pytest.raises(ValidationError, match="max_processor_retries"):
        agent().plan(max_processor_retries=retries)


def test_memory_options_need_memory():
    with pytest.raises(ValidationError, match="need an agent with memory"):
        Agent(id="bare").plan(memory_options={"read_only": True})
