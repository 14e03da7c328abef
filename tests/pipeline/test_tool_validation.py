"""Tool arguments are validated against the tool's JSON schema; an invalid schema is refused when the
tool is first used."""

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
