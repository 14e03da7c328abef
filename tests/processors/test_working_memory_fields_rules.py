"""Working memory by field, to the character: which lines are fields, what a field's value is, how
setting one rewrites the text, and which pinned fields an update keeps (and how the result is
written). Pure functions, no database."""

from __future__ import annotations

import json

import pytest

from memproc.exceptions import ValidationError
from memproc.processors.working_memory_fields import MemoryField, field_set, fields_of, keep_pinned

SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}}


def md(text: str, template: str = "") -> list[tuple[str, str]]:
    return [(f.name, f.value) for f in fields_of(text=text, mode="markdown", template=template)]


# Which lines are fields


def test_field_lines_take_a_dash_or_a_star_and_spaces_or_a_tab():
    text = "- **A**: 1\n* **B**: 2\n-\t**C**: 3\n-   **D**:4\n-**E**: no\n  - **F**: indented\n**G**: bare"
    assert md(text) == [("A", "1"), ("B", "2"), ("C", "3"), ("D", "4")]


def test_names_and_values_are_trimmed():
    assert md("- ** Full Name **:   Ada Lovelace   ") == [("Full Name", "Ada Lovelace")]
    assert md("- **Empty**:") == [("Empty", "")]
    assert md("- **Empty**:   ") == [("Empty", "")]


def test_continuation_lines_join_the_value_until_an_unindented_line():
    text = "- **A**: first\n  second\n\n\tthird\nplain text\n  not A's\n- **B**:\n  only continued"
    assert md(text) == [("A", "first\nsecond\nthird"), ("B", "only continued")]


def test_indented_lines_before_any_field_belong_to_none():
    assert md("# Title\n  indented\n- **A**: x") == [("A", "x")]


def test_the_template_orders_the_fields_and_gives_empty_values():
    template = "- **Name**:\n- **City**:"
    assert md("- **Pet**: cat\n- **City**: Oslo", template) == [
        ("Name", ""),
        ("City", "Oslo"),
        ("Pet", "cat"),
    ]
    assert fields_of(text="", mode="markdown", template=template) == [
        MemoryField("Name", ""),
        MemoryField("City", ""),
    ]


def test_a_field_named_twice_keeps_its_last_value_in_its_first_place():
    assert md("- **A**: 1\n- **B**: 2\n- **A**: 3") == [("A", "3"), ("B", "2")]


def test_json_fields_are_the_schemas_then_the_stored_ones():
    got = fields_of(text='{"pet": "cat", "age": 3}', mode="schema", schema=SCHEMA)
    assert got == [MemoryField("name", None), MemoryField("age", 3), MemoryField("pet", "cat")]
    assert fields_of(text='{"a": [1]}', mode="schema") == [MemoryField("a", [1])]
    assert fields_of(text="", mode="schema", schema={"type": "object", "properties": None}) == []
    assert fields_of(text="not json", mode="schema", schema={"type": "object"}) == []


# Setting one field


def test_setting_a_field_replaces_its_line_and_its_continuation_lines():
    text = "# Me\n- **A**: old\n  more old\n- **B**: keep"
    assert (
        field_set(current=text, name="A", value="new", mode="markdown") == "# Me\n- **A**: new\n- **B**: keep"
    )


def test_a_blank_line_ends_the_lines_a_set_replaces():
    text = "- **A**: old\n  cont\n\n  after blank"
    assert field_set(current=text, name="A", value="new", mode="markdown") == "- **A**: new\n\n  after blank"


def test_a_multi_line_value_continues_on_indented_lines_without_blanks():
    got = field_set(
        current="- **A**: x\n- **B**: y", name="A", value="  one \n\n  two\n three  \n", mode="markdown"
    )
    assert got == "- **A**: one\n  two\n  three\n- **B**: y"


def test_an_empty_value_leaves_the_bare_field_line():
    assert (
        field_set(current="- **A**: x\n- **B**: y", name="A", value="  ", mode="markdown")
        == "- **A**:\n- **B**: y"
    )
    got = field_set(current="- **A**: x", name="A", value="\nsecond", mode="markdown")
    assert got == "- **A**: second"


def test_a_template_field_missing_from_the_text_is_appended():
    got = field_set(
        current="# Me\n- **A**: x", name="B", value="y", mode="markdown", template="- **A**:\n- **B**:"
    )
    assert got == "# Me\n- **A**: x\n- **B**: y"


def test_an_empty_memory_starts_from_the_template():
    template = "# Me\n- **A**:\n- **B**:"
    assert field_set(current="  \n", name="B", value="y", mode="markdown", template=template) == (
        "# Me\n- **A**:\n- **B**: y"
    )


def test_unknown_fields_and_non_text_values_are_refused_word_for_word():
    with pytest.raises(ValidationError) as raised:
        field_set(current="- **A**: x", name="Nope", value="x", mode="markdown", template="- **B**:")
    assert str(raised.value) == "No working-memory field 'Nope'"
    with pytest.raises(ValidationError) as raised:
        field_set(current="- **A**: x", name="A", value=["x"], mode="markdown")
    assert str(raised.value) == "A Markdown field's value is text"
    with pytest.raises(ValidationError) as raised:
        field_set(current="{}", name="pet", value="cat", mode="schema", schema=SCHEMA)
    assert str(raised.value) == "No working-memory field 'pet'"


def test_a_json_field_set_is_merged_sorted_and_checked():
    assert field_set(current='{"name": "Ada"}', name="age", value=36, mode="schema", schema=SCHEMA) == (
        '{"age": 36, "name": "Ada"}'
    )
    assert field_set(current='{"pet": "cat"}', name="pet", value="Zoë", mode="schema") == '{"pet": "Zoë"}'
    with pytest.raises(ValidationError, match="schema at age"):
        field_set(current="{}", name="age", value="old", mode="schema", schema=SCHEMA)


# Pinned fields an update keeps


def test_nothing_pinned_or_nothing_changed_keeps_the_update_as_sent():
    assert keep_pinned(current="- **A**: 1", new="- **A**: 2", pinned=[], mode="markdown") == (
        "- **A**: 2",
        [],
    )
    assert keep_pinned(current='{"b":1}', new='{"b":1}', pinned=["b"], mode="schema") == ('{"b":1}', [])


def test_a_json_update_that_leaves_the_pins_alone_is_stored_as_sent():
    new = '{"z": 1, "a": 2}'
    assert keep_pinned(current='{"a": 2}', new=new, pinned=["a", "q"], mode="schema") == (new, [])


def test_a_json_pin_is_restored_removed_or_put_back_and_the_result_is_sorted():
    new, kept = keep_pinned(
        current='{"name": "Ada", "gone": 1, "x": "ø"}',
        new='{"x": "ø", "name": "Bob", "added": 2}',
        pinned=["added", "name", "name", "gone"],
        mode="schema",
    )
    assert kept == ["added", "name", "gone"]
    assert new == '{"gone": 1, "name": "Ada", "x": "ø"}'


def test_a_json_pin_held_as_null_differs_from_an_absent_one():
    new, kept = keep_pinned(current='{"a": null}', new='{"b": 1}', pinned=["a"], mode="schema")
    assert kept == ["a"] and json.loads(new) == {"a": None, "b": 1}
    new, kept = keep_pinned(current='{"b": 0}', new='{"a": null, "b": 0}', pinned=["a"], mode="schema")
    assert kept == ["a"] and json.loads(new) == {"b": 0}


def test_a_markdown_pin_is_restored_in_place_and_named_once():
    current = "- **Name**: Ada\n  Lovelace\n- **City**: Oslo"
    new, kept = keep_pinned(
        current=current,
        new="- **Name**: Bob\n- **City**: Rome",
        pinned=["Name", "Name", "City"],
        mode="markdown",
    )
    assert kept == ["Name", "City"]
    assert new == "- **Name**: Ada\n  Lovelace\n- **City**: Oslo"


def test_a_markdown_pin_the_update_dropped_is_appended():
    new, kept = keep_pinned(current="- **A**: 1\n- **B**: 2", new="- **B**: 3", pinned=["A"], mode="markdown")
    assert (new, kept) == ("- **B**: 3\n- **A**: 1", ["A"])


def test_a_markdown_pin_the_memory_never_had_is_not_kept():
    assert keep_pinned(current="- **A**: 1", new="- **A**: 1\n- **Z**: 9", pinned=["Z"], mode="markdown") == (
        "- **A**: 1\n- **Z**: 9",
        [],
    )


def test_an_empty_memory_keeps_the_templates_pinned_values():
    template = "- **A**: fixed\n- **B**:"
    new, kept = keep_pinned(
        current=" ", new="- **A**: changed\n- **B**: 2", pinned=["A"], mode="markdown", template=template
    )
    assert (new, kept) == ("- **A**: fixed\n- **B**: 2", ["A"])
    new, kept = keep_pinned(
        current="- **B**: 1",
        new="- **A**: changed\n- **B**: 2",
        pinned=["A"],
        mode="markdown",
        template=template,
    )
    assert (new, kept) == ("- **A**: changed\n- **B**: 2", [])


def test_trailing_spaces_of_a_continued_value_are_dropped():
    assert md("- **A**: first   \n  second") == [("A", "first\nsecond")]


def test_a_set_replaces_tab_indented_continuation_lines_too():
    text = "- **A**: old\n\tmore old\n- **B**: keep"
    assert field_set(current=text, name="A", value="new", mode="markdown") == "- **A**: new\n- **B**: keep"


def test_a_pin_restored_into_an_empty_update_is_the_whole_text():
    new, kept = keep_pinned(current="- **A**: one\n  two", new="", pinned=["A"], mode="markdown")
    assert (new, kept) == ("- **A**: one\n  two", ["A"])
