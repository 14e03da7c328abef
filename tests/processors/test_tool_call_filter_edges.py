"""ToolCallFilter at its edges: the wording of its option errors, its repr, parts without a call id,
and which messages it leaves alone."""

from __future__ import annotations

import re

import pytest

from memproc.exceptions import ConfigurationError
from memproc.messages import Message, TextPart, ToolCallPart, ToolResultPart
from memproc.processors.tool_call_filter import ToolCallFilter

from .conftest import assistant, ids, make_ctx, tool_call, tool_result, user


def exactly(text: str) -> str:
    return f"^{re.escape(text)}$"


# --- options ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["weather", b"weather", 42, 3.5])
def test_exclude_that_is_not_a_list_of_names_is_an_error_that_shows_it(bad):
    message = f"ToolCallFilter(exclude=...) must be a list of tool names, not {bad!r}"
    with pytest.raises(ConfigurationError, match=exactly(message)):
        ToolCallFilter(exclude=bad)


@pytest.mark.parametrize("bad", [[""], [None], ["weather", 3], ("weather", "")])
def test_exclude_must_hold_non_empty_names(bad):
    with pytest.raises(
        ConfigurationError, match=exactly("ToolCallFilter(exclude=...) must hold non-empty tool names")
    ):
        ToolCallFilter(exclude=bad)


def test_exclude_takes_any_iterable_of_names():
    assert ToolCallFilter(exclude=iter(["a", "b"])).exclude == frozenset({"a", "b"})
    assert ToolCallFilter(exclude={"a"}).exclude == frozenset({"a"})
    assert ToolCallFilter(exclude=[]).exclude == frozenset()
    assert ToolCallFilter().exclude is None


def test_repr_names_what_it_filters():
    assert repr(ToolCallFilter()) == "<ToolCallFilter: all tools>"
    names = ["weather", "calendar", "search", "email", "maps", "translate"]
    assert (
        repr(ToolCallFilter(exclude=names))
        == "<ToolCallFilter: calendar, email, maps, search, translate, weather>"
    )
    assert repr(ToolCallFilter(exclude=["weather"])) == "<ToolCallFilter: weather>"
    assert repr(ToolCallFilter(exclude=[])) == "<ToolCallFilter: no tools>"


# --- what it removes -------------------------------------------------------------------------------


def test_parts_without_a_call_id_are_removed_by_name_alone():
    both = Message.create(
        "assistant",
        [TextPart("checking"), ToolCallPart("", "weather", {}), ToolCallPart("", "calendar", {})],
        id="both",
    )
    results = Message.create(
        "tool", [ToolResultPart("", "weather", "sunny"), ToolResultPart("", "calendar", "ok")], id="results"
    )
    ctx = make_ctx([both, results], [user("next", id="new")])
    result = ToolCallFilter(exclude=["weather"]).process_input(ctx)
    assert ids(result) == ["both", "results", "new"]
    assert result[0].parts == (TextPart("checking"), ToolCallPart("", "calendar", {}))
    assert result[1].parts == (ToolResultPart("", "calendar", "ok"),)


def test_without_exclude_parts_without_a_call_id_all_go():
    lone = Message.create("assistant", [ToolCallPart("", "weather", {})], id="lone")
    ctx = make_ctx([user("q", id="q"), lone], [user("next", id="new")])
    assert ids(ToolCallFilter().process_input(ctx)) == ["q", "new"]


def test_a_new_part_without_a_call_id_is_left_alone():
    new_call = Message.create("assistant", [ToolCallPart("", "weather", {})], id="new-call")
    ctx = make_ctx([user("q", id="q")], [new_call])
    assert ToolCallFilter().process_input(ctx) is None


def test_a_call_answered_in_the_new_input_keeps_the_same_id_in_history_too():
    # The id is protected by the new input: every loaded part carrying it stays.
    loaded = [tool_call("w1", "weather", id="call"), tool_result("w1", "weather", id="old-result")]
    ctx = make_ctx(loaded, [tool_result("w1", "weather", id="new-result")])
    assert ToolCallFilter(exclude=["weather"]).process_input(ctx) is None


def test_only_the_named_tool_goes_when_another_shares_its_message():
    message = Message.create(
        "assistant", [ToolCallPart("w1", "weather", {}), ToolCallPart("c1", "calendar", {})], id="calls"
    )
    loaded = [message, tool_result("w1", "weather", id="r-w"), tool_result("c1", "calendar", id="r-c")]
    ctx = make_ctx(loaded, [user("next", id="new")])
    result = ToolCallFilter(exclude=["calendar"]).process_input(ctx)
    assert ids(result) == ["calls", "r-w", "new"]
    assert result[0].parts == (ToolCallPart("w1", "weather", {}),)
    assert result[1] is loaded[1]


def test_nothing_loaded_means_nothing_to_filter():
    new = [tool_call("w1", "weather", id="call"), tool_result("w1", "weather", id="result")]
    assert ToolCallFilter().process_input(make_ctx([], new)) is None
    assert ToolCallFilter(exclude=["weather"]).process_input(make_ctx([], new)) is None


def test_loaded_messages_without_tool_parts_are_passed_through_as_they_are():
    question, answer = user("q", id="q"), assistant("a", id="a")
    loaded = [question, tool_call("w1", id="call"), tool_result("w1", id="result"), answer]
    result = ToolCallFilter().process_input(make_ctx(loaded))
    assert ids(result) == ["q", "a"]
    assert result[0] is question and result[1] is answer
