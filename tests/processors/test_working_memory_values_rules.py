"""The rules for a working memory's next value, as the update tool and the service apply them: the
Markdown replace with its empty-template guard, the JSON deep merge, the schema check and the refusals
the model reads, word for word. Pure functions, no database."""

from __future__ import annotations

import json

import pytest

from memproc.exceptions import ValidationError
from memproc.processors.working_memory_values import (
    compute_next,
    deep_merge,
    next_markdown,
    next_schema_value,
    normalise,
    parse_json_memory,
)

TEMPLATE = "# User\n- Name:\n- City:"
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "prefs": {"type": "object", "properties": {"tea": {"type": "boolean"}}},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
}
NOT_AN_OBJECT = "Working memory update must be a JSON object"


# deep_merge


def test_objects_merge_key_by_key():
    current = {"a": 1, "prefs": {"tea": True, "milk": False}}
    assert deep_merge(current, {"prefs": {"milk": True}, "b": 2}) == {
        "a": 1,
        "prefs": {"tea": True, "milk": True},
        "b": 2,
    }


def test_none_deletes_a_key_and_a_missing_one_is_no_error():
    assert deep_merge({"a": 1, "b": 2}, {"a": None, "zz": None}) == {"b": 2}


def test_arrays_and_scalars_replace():
    assert deep_merge({"tags": ["x", "y"], "n": 1}, {"tags": ["z"], "n": "one"}) == {
        "tags": ["z"],
        "n": "one",
    }


def test_an_object_replacing_a_scalar_or_a_missing_key_is_merged_into_an_empty_one():
    assert deep_merge({"a": 5}, {"a": {"x": 1, "gone": None}, "b": {"y": None, "z": 2}}) == {
        "a": {"x": 1},
        "b": {"z": 2},
    }


def test_nested_deletion_and_the_inputs_stay_as_they_were():
    current = {"p": {"q": {"r": 1, "s": 2}}}
    patch = {"p": {"q": {"r": None}}}
    assert deep_merge(current, patch) == {"p": {"q": {"s": 2}}}
    assert current == {"p": {"q": {"r": 1, "s": 2}}} and patch == {"p": {"q": {"r": None}}}


def test_falsy_values_are_stored_not_deleted():
    assert deep_merge({"a": 1, "b": 1, "c": 1, "d": {"k": 1}}, {"a": 0, "b": "", "c": False, "d": {}}) == {
        "a": 0,
        "b": "",
        "c": False,
        "d": {"k": 1},
    }


# parse_json_memory and normalise


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("", {}),
        ("   \n", {}),
        ("not json", {}),
        ("[1, 2]", {}),
        ('"text"', {}),
        ("3", {}),
        ('{"a": 1}', {"a": 1}),
        ('  {"a": {"b": null}}  ', {"a": {"b": None}}),
    ],
)
def test_a_stored_json_memory_is_an_object_or_empty(text, parsed):
    assert parse_json_memory(text) == parsed


def test_normalise_drops_blank_lines_and_edge_spaces():
    assert normalise("\n  # A  \n\n   - b\t\n\n") == "# A\n- b"
    assert normalise("") == ""
    assert normalise("one line") == "one line"


# next_markdown


def test_markdown_replaces_the_whole_text():
    assert next_markdown(current="# User\n- Name: Ada", new="# User\n- Name: Bob", template=TEMPLATE) == (
        "# User\n- Name: Bob"
    )


def test_the_empty_template_never_erases_real_data():
    with pytest.raises(ValidationError) as raised:
        next_markdown(
            current="# User\n- Name: Ada", new="\n# User\n  - Name:\n\n- City:  ", template=TEMPLATE
        )
    assert str(raised.value) == (
        "Refused: the update equals the empty template and would erase the existing working memory"
    )


def test_the_template_may_replace_an_empty_or_template_memory():
    assert next_markdown(current="", new=TEMPLATE, template=TEMPLATE) == TEMPLATE
    assert next_markdown(current="  \n", new=TEMPLATE, template=TEMPLATE) == TEMPLATE
    assert next_markdown(current=TEMPLATE + "\n\n", new=TEMPLATE, template=TEMPLATE) == TEMPLATE


def test_an_update_that_differs_from_the_template_is_kept_as_sent():
    sent = "  # User\n- Name: Bob\n"
    assert next_markdown(current="# User\n- Name: Ada", new=sent, template=TEMPLATE) == sent


@pytest.mark.parametrize("value", [{"name": "Ada"}, None, 3, ["a"]])
def test_markdown_must_be_text(value):
    with pytest.raises(ValidationError) as raised:
        next_markdown(current="", new=value, template=TEMPLATE)
    assert str(raised.value) == "Working memory must be Markdown text"


# next_schema_value


def test_a_patch_merges_into_the_stored_object_and_is_stored_sorted_and_unescaped():
    current = json.dumps({"name": "Ada", "tags": ["a"]})
    new = next_schema_value(current=current, patch={"prefs": {"tea": True}, "tags": ["ø"]}, schema=SCHEMA)
    assert new == '{"name": "Ada", "prefs": {"tea": true}, "tags": ["ø"]}'


def test_a_patch_may_come_as_json_text():
    assert next_schema_value(current="", patch='{"name": "Zoë"}', schema=SCHEMA) == '{"name": "Zoë"}'


@pytest.mark.parametrize("patch", ["not json", "[1]", "3", ["a"], 3, None, "null"])
def test_a_patch_that_is_not_an_object_is_refused(patch):
    with pytest.raises(ValidationError) as raised:
        next_schema_value(current="{}", patch=patch, schema=None)
    assert str(raised.value) == NOT_AN_OBJECT


def test_unparseable_stored_memory_starts_from_empty():
    assert next_schema_value(current="garbage", patch={"a": 1}, schema=None) == '{"a": 1}'


def test_without_a_schema_anything_goes():
    assert next_schema_value(current="{}", patch={"x": [1, {"y": 2}]}, schema=None) == '{"x": [1, {"y": 2}]}'
    assert next_schema_value(current="{}", patch={"x": 1}, schema={}) == '{"x": 1}'


def test_a_schema_mismatch_names_the_path_and_the_reason():
    with pytest.raises(ValidationError) as raised:
        next_schema_value(current="{}", patch={"prefs": {"tea": "yes"}}, schema=SCHEMA)
    assert (
        str(raised.value)
        == "Working memory does not match the schema at prefs/tea: 'yes' is not of type 'boolean'"
    )
    assert isinstance(raised.value.__cause__, Exception)
    with pytest.raises(ValidationError) as raised:
        next_schema_value(current="{}", patch={"tags": ["a", 2]}, schema=SCHEMA)
    assert (
        str(raised.value) == "Working memory does not match the schema at tags/1: 2 is not of type 'string'"
    )


def test_a_mismatch_at_the_root_says_root():
    schema = {"type": "object", "required": ["name"]}
    with pytest.raises(ValidationError) as raised:
        next_schema_value(current="{}", patch={"city": "Oslo"}, schema=schema)
    assert (
        str(raised.value)
        == "Working memory does not match the schema at (root): 'name' is a required property"
    )


def test_the_schema_checks_the_merged_value_not_the_patch():
    schema = {"type": "object", "required": ["name"]}
    assert next_schema_value(current='{"name": "Ada"}', patch={"city": "Oslo"}, schema=schema) == (
        '{"city": "Oslo", "name": "Ada"}'
    )


# compute_next


def test_compute_next_is_markdown_by_default():
    assert compute_next(current="old", value="new") == "new"
    with pytest.raises(ValidationError, match="Markdown text"):
        compute_next(current="old", value={"a": 1})


def test_compute_next_guards_the_template_it_is_given():
    with pytest.raises(ValidationError, match="equals the empty template"):
        compute_next(current="# User\n- Name: Ada", value=TEMPLATE, template=TEMPLATE)
    assert compute_next(current="# User\n- Name: Ada", value=TEMPLATE) == TEMPLATE  # no template given


def test_compute_next_in_schema_mode_merges_or_replaces():
    current = '{"name": "Ada", "tags": ["a"]}'
    assert (
        compute_next(current=current, value={"tags": ["b"]}, mode="schema")
        == '{"name": "Ada", "tags": ["b"]}'
    )
    assert (
        compute_next(current=current, value={"tags": ["b"]}, mode="schema", replace=True) == '{"tags": ["b"]}'
    )


def test_compute_next_in_schema_mode_checks_the_schema():
    with pytest.raises(ValidationError, match="at name: 3 is not of type 'string'"):
        compute_next(current="{}", value={"name": 3}, mode="schema", schema=SCHEMA)
    assert compute_next(current="{}", value={"name": "x"}, mode="schema", schema=SCHEMA) == '{"name": "x"}'


def test_replace_is_ignored_in_markdown_mode():
    assert compute_next(current="# User\n- Name: Ada", value="x", replace=True) == "x"
    with pytest.raises(ValidationError, match="equals the empty template"):
        compute_next(current="# User\n- Name: Ada", value=TEMPLATE, template=TEMPLATE, replace=True)
