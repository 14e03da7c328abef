"""Tool arguments are validated against the tool's JSON schema; an invalid schema is refused when the
tool is first used, except for memproc's own constant schemas, which this file checks once."""

from __future__ import annotations

import jsonschema
import pytest

from memproc.exceptions import ToolError
from memproc.tools import Tool

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


@pytest.mark.parametrize("mode", ["schema", "markdown"])
def test_the_working_memory_tools_constant_schemas_are_valid(mode: str) -> None:
    from memproc.processors.working_memory import UPDATE_TOOL_PARAMETERS

    params = UPDATE_TOOL_PARAMETERS[mode]
    jsonschema.validators.validator_for(params).check_schema(params)


def test_the_search_tools_constant_schema_is_valid() -> None:
    from memproc.processors.memory_search import PARAMETERS

    jsonschema.validators.validator_for(PARAMETERS).check_schema(PARAMETERS)


def test_a_tool_whose_schema_was_checked_still_validates_its_arguments() -> None:
    tool = Tool(name="lookup", description="", parameters=PARAMS, execute=lambda q: q, schema_checked=True)
    with pytest.raises(ToolError, match="Invalid arguments for lookup"):
        tool.run({"q": 3}, context=None)
