"""Tool arguments are validated against the tool's JSON schema; the schema itself is checked once per
process, not once per Tool object (the working-memory tool is rebuilt every turn)."""

from __future__ import annotations

import jsonschema
import pytest

from memproc import Memory
from memproc.exceptions import ToolError
from memproc.llm.types import ModelResponse, ToolCall
from memproc.tools import Tool, schema_validator

PARAMS = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}


def make_tool(params: dict = PARAMS) -> Tool:
    return Tool(name="lookup", description="", parameters=params, execute=lambda q: q.upper())


def test_bad_arguments_raise_a_tool_error_and_good_ones_run() -> None:
    tool = make_tool()
    assert tool.run({"q": "x"}, context=None) == "X"
    with pytest.raises(ToolError, match="Invalid arguments for lookup"):
        tool.run({"q": 3}, context=None)


def test_an_invalid_schema_is_refused_when_first_used() -> None:
    tool = make_tool({"type": "object", "properties": {"q": {"type": "no-such-type"}}})
    with pytest.raises(jsonschema.SchemaError):
        tool.run({"q": "x"}, context=None)


def test_equal_schemas_share_one_validator_whatever_their_key_order() -> None:
    reordered = {"required": ["q"], "properties": {"q": {"type": "string"}}, "type": "object"}
    assert make_tool().validator is make_tool(reordered).validator is schema_validator(PARAMS)


@pytest.mark.django_db
def test_the_working_memory_schema_is_checked_at_most_once_over_many_turns(
    make_agent, model, monkeypatch
) -> None:
    checked: list[dict] = []
    draft = jsonschema.validators.validator_for({})
    original = draft.check_schema.__func__

    def spy(cls, schema, *args, **kwargs):
        checked.append(schema)
        return original(cls, schema, *args, **kwargs)

    monkeypatch.setattr(draft, "check_schema", classmethod(spy))
    agent = make_agent(memory=Memory(last_messages=4, working_memory={"scope": "thread"}))
    for turn in range(3):
        model.add(
            ModelResponse(
                tool_calls=[ToolCall(f"c{turn}", "updateWorkingMemory", {"memory": f"# Notes {turn}"})]
            ),
            "done",
        )
        agent.generate(f"turn {turn}", thread_id="t1", resource_id="r1")
    assert agent.memory.get_working_memory(thread_id="t1", resource_id="r1") == "# Notes 2"
    assert len(checked) <= 1  # none when an earlier test already built this schema's validator
