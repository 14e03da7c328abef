"""ToolCallFilter: past tool calls and results leave the prompt in pairs; new messages stay."""

from __future__ import annotations

import dataclasses

import pytest

from memproc.exceptions import ConfigurationError
from memproc.messages import Message, TextPart, ToolCallPart, ToolResultPart
from memproc.processors.tool_call_filter import ToolCallFilter

from .conftest import assistant, ids, make_ctx, tool_call, tool_result, user


def conversation() -> list[Message]:
    return [
        user("What's the weather in Paris?", id="q1"),
        tool_call("w1", "weather", {"city": "Paris"}, id="call-w1"),
        tool_result("w1", "weather", "sunny", id="result-w1"),
        assistant("It is sunny in Paris.", id="a1"),
        user("Add it to my calendar", id="q2"),
        tool_call("cal1", "calendar", {"title": "picnic"}, id="call-cal1"),
        tool_result("cal1", "calendar", {"ok": True}, id="result-cal1"),
        assistant("Done.", id="a2"),
    ]


def tool_parts(messages: list[Message]) -> list[tuple[str, str]]:
    return [
        (type(p).__name__, p.tool_call_id)
        for m in messages
        for p in m.parts
        if isinstance(p, (ToolCallPart, ToolResultPart))
    ]


def test_removes_all_tool_calls_and_results_by_default():
    ctx = make_ctx(conversation(), [user("thanks", id="new")])
    result = ToolCallFilter().process_input(ctx)
    assert ids(result) == ["q1", "a1", "q2", "a2", "new"]
    assert tool_parts(result) == []


def test_removes_only_the_named_tools_with_their_results():
    ctx = make_ctx(conversation(), [user("thanks", id="new")])
    result = ToolCallFilter(exclude=["weather"]).process_input(ctx)
    assert ids(result) == ["q1", "a1", "q2", "call-cal1", "result-cal1", "a2", "new"]
    assert tool_parts(result) == [("ToolCallPart", "cal1"), ("ToolResultPart", "cal1")]


def test_several_named_tools():
    ctx = make_ctx(conversation())
    result = ToolCallFilter(exclude=["weather", "calendar"]).process_input(ctx)
    assert tool_parts(result) == []


def test_an_unknown_tool_name_changes_nothing():
    ctx = make_ctx(conversation())
    assert ToolCallFilter(exclude=["email"]).process_input(ctx) is None


def test_an_empty_exclude_list_filters_nothing():
    ctx = make_ctx(conversation())
    assert ToolCallFilter(exclude=[]).process_input(ctx) is None


def test_keeps_the_text_of_an_assistant_message_that_also_called_a_tool():
    mixed = tool_call("w1", "weather", text="Let me check the forecast.", id="mixed")
    ctx = make_ctx([user("weather?", id="q"), mixed, tool_result("w1", "weather", id="r")])
    result = ToolCallFilter().process_input(ctx)
    assert ids(result) == ["q", "mixed"]
    assert result[1].parts == (TextPart("Let me check the forecast."),)
    assert result[1] is not mixed


def test_a_result_goes_with_its_call_even_without_a_tool_name():
    # Results built from the OpenAI format carry only the call id.
    loaded = [tool_call("w1", "weather", id="call"), tool_result("w1", "", "sunny", id="result")]
    ctx = make_ctx(loaded, [user("thanks", id="new")])
    assert ids(ToolCallFilter(exclude=["weather"]).process_input(ctx)) == ["new"]


def test_a_result_whose_call_is_gone_is_removed_by_its_tool_name():
    ctx = make_ctx([tool_result("w1", "weather", id="orphan"), assistant("sunny", id="a")])
    assert ids(ToolCallFilter(exclude=["weather"]).process_input(ctx)) == ["a"]


def test_one_call_of_several_in_a_message():
    both = Message.create(
        "assistant", [ToolCallPart("w1", "weather", {}), ToolCallPart("c1", "calendar", {})], id="both"
    )
    results = Message.create(
        "tool",
        [ToolResultPart("w1", "weather", "sunny"), ToolResultPart("c1", "calendar", "ok")],
        id="results",
    )
    ctx = make_ctx([both, results])
    result = ToolCallFilter(exclude=["weather"]).process_input(ctx)
    assert tool_parts(result) == [("ToolCallPart", "c1"), ("ToolResultPart", "c1")]


def test_leaves_the_turns_own_new_messages_alone():
    new = [tool_call("n1", "weather", id="new-call"), tool_result("n1", "weather", id="new-result")]
    ctx = make_ctx(conversation(), new)
    result = ToolCallFilter().process_input(ctx)
    assert result[-2:] == new
    assert result[-2] is new[0] and result[-1] is new[1]


def test_keeps_a_past_call_whose_result_is_this_turns_input():
    # The client ran the tool and sends the result now: the pair must stay whole.
    loaded = [user("weather?", id="q"), tool_call("w1", "weather", id="call")]
    ctx = make_ctx(loaded, [tool_result("w1", "weather", id="result")])
    assert ToolCallFilter().process_input(ctx) is None


def test_returns_none_when_there_is_nothing_to_filter():
    ctx = make_ctx([user("hi", id="q"), assistant("hello", id="a")], [user("bye", id="new")])
    assert ToolCallFilter().process_input(ctx) is None
    assert ToolCallFilter().process_input(make_ctx([], conversation())) is None  # all new


def test_returns_new_objects_and_never_mutates():
    loaded = conversation()
    snapshot = [dataclasses.replace(m) for m in loaded]
    ctx = make_ctx(loaded, [user("thanks", id="new")])
    before = list(ctx.messages)
    result = ToolCallFilter().process_input(ctx)
    assert list(ctx.messages) == before
    assert loaded == snapshot
    assert tool_parts(loaded) != []
    assert result[0] is loaded[0]  # untouched messages are passed through as they are
    with pytest.raises(dataclasses.FrozenInstanceError):
        loaded[1].parts = ()
    with pytest.raises((AttributeError, TypeError)):
        loaded[1].parts.append(TextPart("x"))


@pytest.mark.parametrize("exclude", ["weather", [""], [None], 42])
def test_bad_exclude_is_a_configuration_error(exclude):
    with pytest.raises(ConfigurationError):
        ToolCallFilter(exclude=exclude)


def test_exclude_is_keyword_only_and_the_id_is_stable():
    with pytest.raises(TypeError):
        ToolCallFilter(["weather"])
    assert ToolCallFilter.id == "tool-call-filter"
    assert ToolCallFilter(exclude=("weather",)).exclude == frozenset({"weather"})
