"""What WorkingMemory writes and refuses, word for word: its options and defaults, the system message
it composes (scope, read-only, limit and pin notes, the template or schema, the data), its update tool,
and what an update answers. Mutation testing found these unread (docs/testing.md)."""

from __future__ import annotations

import json

import pytest

from memproc.exceptions import ConfigurationError, ToolError
from memproc.processors.turn import Turn
from memproc.processors.working_memory import (
    DEFAULT_TEMPLATE,
    MARKDOWN_INSTRUCTIONS,
    PINNED_NOTE,
    PINNED_RESULT,
    SCHEMA_INSTRUCTIONS,
    TOOL_NAME,
    UPDATE_TOOL_PARAMETERS,
    WorkingMemory,
)
from memproc.tools import ToolContext

SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "city": {"type": "string"}}}
EVERY = " with this user, in every conversation"
THIS = " in this conversation"
READ_ONLY = "\nThe working memory is read-only in this conversation."


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"scope": "all"}, "WorkingMemory(scope=...) must be 'resource' or 'thread'"),
        ({"scope": ""}, "WorkingMemory(scope=...) must be 'resource' or 'thread'"),
        ({"schema": ["a"]}, "WorkingMemory(schema=...) must be a JSON schema of type object"),
        ({"schema": {"type": "array"}}, "WorkingMemory(schema=...) must be a JSON schema of type object"),
        ({"max_tokens": 0}, "WorkingMemory(max_tokens=...) must be a positive integer or None"),
        ({"max_tokens": -5}, "WorkingMemory(max_tokens=...) must be a positive integer or None"),
        ({"max_tokens": True}, "WorkingMemory(max_tokens=...) must be a positive integer or None"),
        ({"max_tokens": 2.5}, "WorkingMemory(max_tokens=...) must be a positive integer or None"),
    ],
)
def test_bad_options_say_what_is_wrong(kwargs, message):
    with pytest.raises(ConfigurationError) as raised:
        WorkingMemory(**kwargs)
    assert str(raised.value) == message


def test_defaults_and_the_template_each_mode_gets():
    memory = WorkingMemory()
    assert (memory.scope, memory.template, memory.schema, memory.max_tokens, memory.read_only) == (
        "resource",
        DEFAULT_TEMPLATE,
        None,
        None,
        False,
    )
    assert memory.mode == "markdown"
    schema = WorkingMemory(schema=SCHEMA, max_tokens=1, scope="thread", read_only=True)
    assert (schema.mode, schema.template, schema.max_tokens, schema.scope, schema.read_only) == (
        "schema",
        "",
        1,
        "thread",
        True,
    )
    assert WorkingMemory(schema={"properties": {}}).mode == "schema"  # "object" when not said
    assert WorkingMemory(template="# Notes").template == "# Notes"
    assert WorkingMemory(schema=SCHEMA, template="kept").template == "kept"


def test_the_key_follows_the_scope():
    assert WorkingMemory().key_for("t", "r") == "r"
    assert WorkingMemory(scope="thread").key_for("t", "r") == "t"


def markdown_message(
    *, scope_note: str, limit_note: str = "", read_only_note: str = "", template: str, data: str
):
    head = MARKDOWN_INSTRUCTIONS.format(
        scope_note=scope_note, tool=TOOL_NAME, read_only_note=read_only_note, limit_note=limit_note
    )
    head += f"\n<working_memory_template>\n{template}\n</working_memory_template>"
    return f"{head}\n<working_memory>\n{data}\n</working_memory>"


def test_the_markdown_message_word_for_word():
    empty = WorkingMemory().system_message("")
    assert (empty.role, empty.id) == ("system", "working-memory")
    assert empty.text == markdown_message(scope_note=EVERY, template=DEFAULT_TEMPLATE, data=DEFAULT_TEMPLATE)
    memory = WorkingMemory(scope="thread", template="# Notes\n-", max_tokens=50, read_only=True)
    text = memory.system_message("# Notes\n- likes tea", pinned=("Name", "City")).text
    assert text == markdown_message(
        scope_note=THIS,
        limit_note=" Keep it under 50 tokens." + PINNED_NOTE.format(names="Name, City"),
        read_only_note=READ_ONLY,
        template="# Notes\n-",
        data="# Notes\n- likes tea",
    )


def test_the_schema_message_word_for_word():
    memory = WorkingMemory(schema=SCHEMA)
    head = SCHEMA_INSTRUCTIONS.format(
        scope_note=EVERY,
        tool=TOOL_NAME,
        read_only_note="",
        limit_note="",
        schema=json.dumps(SCHEMA, indent=2),
    )
    assert memory.system_message("").text == f"{head}\n<working_memory>\n{{}}\n</working_memory>"
    stored = '{"name": "Ada"}'
    assert memory.system_message(stored).text == f"{head}\n<working_memory>\n{stored}\n</working_memory>"


def test_stored_memory_cannot_close_its_block():
    text = WorkingMemory().system_message("x</working_memory>y").text
    assert text.count("</working_memory>") == 1 and text.endswith("x&lt;/working_memory>y\n</working_memory>")


@pytest.mark.parametrize(
    ("schema", "description"),
    [
        (None, "Replace the working memory with the complete updated Markdown."),
        (SCHEMA, "Update the working memory: send only changed fields (objects merge, null deletes)."),
    ],
)
def test_the_update_tool(schema, description):
    memory = WorkingMemory(schema=schema)
    tool = memory.update_tool({}, "r")
    assert (tool.name, tool.description, tool.parameters) == (
        TOOL_NAME,
        description,
        UPDATE_TOOL_PARAMETERS[memory.mode],
    )
    assert tool.internal is True and tool.wants_context is True and tool.schema_checked is True


def context(turn: Turn | None) -> ToolContext:
    return ToolContext(thread_id="t", resource_id="r", agent=None, turn=turn)


def test_an_update_is_recorded_on_the_turn_with_what_the_turn_read():
    memory = WorkingMemory(template="# Notes\n-")
    turn = Turn(agent=None, thread_id="t", resource_id="r", store=None, input_messages=[])
    state = {"current": "", "read": ("", 0), "pinned": ()}
    answer = memory.update_tool(state, "r").execute(memory="# Notes\n- tea", context=context(turn))
    assert answer == {"success": True}
    assert state["current"] == "# Notes\n- tea" and "read" not in state
    assert turn.info.working_memory == "# Notes\n- tea"
    [pending] = turn.writes.working_memory
    assert (pending.scope, pending.key, pending.value, pending.mode, pending.template) == (
        "resource",
        "r",
        "# Notes\n- tea",
        "markdown",
        "# Notes\n-",
    )
    assert pending.expected == ("", 0) and pending.schema is None and pending.pinned == ()


def test_a_pinned_field_is_kept_and_the_answer_says_so():
    memory = WorkingMemory(schema=SCHEMA)
    state = {"current": '{"name": "Ada"}', "pinned": ("name",)}
    answer = memory.update_tool(state, "r").execute(
        memory={"name": "Bob", "city": "Paris"}, context=context(None)
    )
    assert answer == {"success": True, "pinned": ["name"], "note": PINNED_RESULT.format(names="name")}
    assert json.loads(state["current"]) == {"name": "Ada", "city": "Paris"}


def test_a_refused_update_is_a_tool_error_and_changes_nothing():
    memory = WorkingMemory(schema=SCHEMA, max_tokens=3)
    state = {"current": "{}", "pinned": ()}
    with pytest.raises(ToolError, match="working memory is limited to 3 tokens; rewrite it shorter"):
        memory.update_tool(state, "r").execute(
            memory={"name": "a very long name " * 5}, context=context(None)
        )
    assert state["current"] == "{}"


def test_an_update_with_nothing_read_starts_from_empty():
    memory = WorkingMemory(template="# Notes\n-")
    state: dict = {}
    assert memory.update_tool(state, "r").execute(memory="# Notes\n- tea", context=context(None)) == {
        "success": True
    }
    assert state["current"] == "# Notes\n- tea"


def test_a_schema_update_records_its_schema_and_the_pins_it_kept():
    memory = WorkingMemory(schema=SCHEMA)
    turn = Turn(agent=None, thread_id="t", resource_id="r", store=None, input_messages=[])
    state = {"current": '{"name": "Ada", "city": "Rome"}', "pinned": ("name", "city"), "read": ("x", 3)}
    answer = memory.update_tool(state, "r").execute(
        memory={"name": "Bob", "city": "Paris"}, context=context(turn)
    )
    assert answer["note"] == PINNED_RESULT.format(names="name, city") and answer["pinned"] == ["name", "city"]
    assert json.loads(state["current"]) == {"name": "Ada", "city": "Rome"}
    [pending] = turn.writes.working_memory
    assert (pending.schema, pending.mode, pending.pinned, pending.expected) == (
        SCHEMA,
        "schema",
        ("name", "city"),
        ("x", 3),
    )


def test_a_markdown_update_keeps_a_pinned_line_by_the_template():
    template = "# User\n- **Name**:\n- **City**:"
    memory = WorkingMemory(template=template)
    state = {"current": "# User\n- **Name**: Ada\n- **City**: Rome", "pinned": ("Name",)}
    answer = memory.update_tool(state, "r").execute(
        memory="# User\n- **Name**: Bob\n- **City**: Paris", context=context(None)
    )
    assert answer["pinned"] == ["Name"]
    assert state["current"] == "# User\n- **Name**: Ada\n- **City**: Paris"
