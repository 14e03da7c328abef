"""The conversation's rules, each on a small hand-made example: ids unique (first copy kept), system
first, memory in time order before the turn's input, tool pairs whole, the resent prefix.

test_conversation_properties.py checks the same rules over random conversations; these examples
pin the exact result, so a rule that quietly changes shows here by name."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from memproc.messages import Message, TextPart, ToolCallPart, ToolResultPart
from memproc.processors.conversation import (
    Conversation,
    echoed_prefix,
    order_messages,
    unanswered_calls,
    unique_by_id,
    whole_tool_pairs,
)

from .conftest import assistant, system, tool_call, tool_result, user

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(message: Message, minutes: float | None, sequence: int | None = None) -> Message:
    when = None if minutes is None else T0 + timedelta(minutes=minutes)
    return message.replace(created_at=when, sequence=sequence)


def ids(messages) -> list[str]:
    return [m.id for m in messages]


def calls(*call_ids: str, id: str | None = None, text: str = "") -> Message:
    parts = ([TextPart(text)] if text else []) + [ToolCallPart(c, "search", {"q": c}) for c in call_ids]
    return Message.create("assistant", parts, id=id)


def results(*call_ids: str, id: str | None = None, text: str = "") -> Message:
    parts = ([TextPart(text)] if text else []) + [ToolResultPart(c, "search", f"r{c}") for c in call_ids]
    return Message.create("tool", parts, id=id)


# --- unique_by_id, order_messages ----------------------------------------------------------------


def test_the_first_copy_of_an_id_is_kept():
    a, b = user("a", id="m1"), user("b", id="m1")
    c = user("c", id="m2")
    assert unique_by_id([a, c, b]) == [a, c]
    assert unique_by_id([]) == []


def test_memory_comes_in_time_order_then_the_input_as_given():
    old = at(user("old", id="h1"), 1)
    older = at(assistant("older", id="h2"), 0)
    new_b, new_a = user("b", id="n2"), user("a", id="n1")
    ordered = order_messages([new_b, old, new_a, older, system("s", id="s")], loaded_ids={"h1", "h2"})
    assert ids(ordered) == ["h2", "h1", "n2", "n1"]


def test_same_time_is_ordered_by_sequence_then_as_given():
    first = at(user("1", id="a"), 5, sequence=1)
    second = at(assistant("2", id="b"), 5, sequence=2)
    unsequenced = at(assistant("?", id="c"), 5)
    assert ids(order_messages([second, first], loaded_ids={"a", "b"})) == ["a", "b"]
    # a message without a sequence sorts before the sequenced ones of its time
    assert ids(order_messages([second, first, unsequenced], loaded_ids={"a", "b", "c"})) == ["c", "a", "b"]
    # sequence 0 is a sequence (not "none")
    zero = at(user("0", id="z"), 5, sequence=0)
    assert ids(order_messages([first, zero, unsequenced], loaded_ids={"a", "z", "c"})) == ["c", "z", "a"]
    # equal keys keep the order given
    twin = at(user("t", id="t"), 5, sequence=1)
    assert ids(order_messages([twin, first], loaded_ids={"a", "t"})) == ["t", "a"]


def test_a_message_without_a_time_is_older_than_any_with_one():
    timed = at(user("t", id="t"), -(10**6))
    untimed = at(user("u", id="u"), None, sequence=99)
    assert ids(order_messages([timed, untimed], loaded_ids={"t", "u"})) == ["u", "t"]


def test_duplicate_ids_are_dropped_before_ordering():
    early, late = at(user("early", id="x"), 1), at(user("late", id="x"), 9)
    other = at(user("o", id="o"), 5)
    assert order_messages([late, other, early], loaded_ids={"x", "o"}) == [other, late]


# --- Conversation ----------------------------------------------------------------------------------


def test_a_conversation_orders_what_it_is_given_and_knows_its_new_input():
    s1, s1_copy = system("rules", id="s1"), system("copy", id="s1")
    h = at(user("h", id="h"), 0)
    n = user("n", id="n")
    conversation = Conversation(system=[s1, s1_copy], messages=[n, h], loaded_ids={"h"})
    assert conversation.system == [s1]
    assert ids(conversation.messages) == ["h", "n"]
    assert ids(conversation.new_input) == ["n"]
    assert conversation.request_messages() == [s1, h, n]


def test_apply_replaces_a_system_message_in_place_and_appends_a_new_one():
    s1, s2 = system("one", id="s1"), system("two", id="s2")
    conversation = Conversation(system=[s1, s2], messages=[user("n", id="n")], loaded_ids=set())
    s1_edited, s3 = system("one, edited", id="s1"), system("three", id="s3")
    h = at(assistant("loaded", id="h"), 0)
    conversation.loaded_ids.add("h")
    conversation.apply([user("n", id="n"), s3, h, s1_edited])
    assert conversation.system == [s1_edited, s2, s3]
    assert ids(conversation.messages) == ["h", "n"]
    assert ids(conversation.new_input) == ["n"]


def test_apply_of_a_list_without_system_messages_keeps_the_system():
    s1 = system("one", id="s1")
    conversation = Conversation(system=[s1], messages=[user("a", id="a")], loaded_ids=set())
    conversation.apply([user("b", id="b")])
    assert conversation.system == [s1]
    assert ids(conversation.messages) == ["b"]


def test_the_request_drops_memorys_incomplete_pairs_but_never_the_input():
    loaded_call = at(tool_call("c1", id="h1"), 0)  # its result was not loaded
    new_call = tool_call("c2", id="n1")  # the turn's own input: sent as it is
    conversation = Conversation(system=[], messages=[loaded_call, new_call], loaded_ids={"h1"})
    assert ids(conversation.request_messages()) == ["n1"]


def test_the_request_takes_overrides_and_responses():
    s = system("s", id="s")
    h = at(user("h", id="h"), 0)
    n = user("n", id="n")
    conversation = Conversation(system=[s], messages=[h, n], loaded_ids={"h"})
    other_system = system("other", id="o")
    answer_call, answer_result = tool_call("c9", id="r1"), tool_result("c9", id="r2")
    request = conversation.request_messages(
        system=[other_system, other_system], messages=[n, h, n], responses=[answer_call, answer_result, n]
    )
    assert ids(request) == ["o", "h", "n", "r1", "r2"]
    # the turn's input stays protected in an override that leaves it out of order
    unanswered = tool_call("c5", id="n5")
    conversation = Conversation(system=[], messages=[unanswered], loaded_ids=set())
    assert ids(conversation.request_messages(messages=[unanswered])) == ["n5"]
    assert ids(conversation.request_messages(messages=[])) == []


def test_a_response_call_without_its_result_is_dropped_from_the_request():
    conversation = Conversation(system=[], messages=[user("n", id="n")], loaded_ids=set())
    request = conversation.request_messages(responses=[calls("c1", id="r1", text="let me look")])
    assert ids(request) == ["n", "r1"]
    assert request[1].parts == (TextPart("let me look"),)


# --- whole_tool_pairs ------------------------------------------------------------------------------


def test_complete_pairs_are_kept_as_they_are():
    messages = [user("q", id="u"), calls("a", "b", id="c"), results("a", id="r1"), results("b", id="r2")]
    assert whole_tool_pairs(messages, protected=set()) == messages


def test_an_unanswered_call_loses_its_part_and_its_message_if_nothing_is_left():
    asked = calls("a", "b", id="c", text="checking")
    answered = results("a", id="r")
    kept = whole_tool_pairs([asked, answered, user("next", id="u")], protected=set())
    assert ids(kept) == ["c", "r", "u"]
    assert kept[0].parts == (TextPart("checking"), ToolCallPart("a", "search", {"q": "a"}))
    assert kept[1] is answered
    assert whole_tool_pairs([calls("a", id="c"), user("next", id="u")], protected=set())[0].id == "u"


def test_a_result_without_its_call_right_before_is_dropped():
    orphan = results("z", id="r")
    kept = whole_tool_pairs([user("q", id="u"), orphan, assistant("a", id="a")], protected=set())
    assert ids(kept) == ["u", "a"]
    # at the very start too
    assert whole_tool_pairs([orphan], protected=set()) == []
    # a result of a call that is not the one directly before
    messages = [calls("a", id="c1"), results("a", id="r1"), user("u", id="u"), results("a", id="r2")]
    assert ids(whole_tool_pairs(messages, protected=set())) == ["c1", "r1", "u"]


def test_a_result_message_keeps_its_answered_parts_and_its_text():
    mixed = results("a", "x", id="r", text="note")
    kept = whole_tool_pairs([calls("a", id="c"), mixed], protected=set())
    assert kept[1].parts == (TextPart("note"), ToolResultPart("a", "search", "ra"))


def test_the_run_of_results_ends_at_the_first_other_message():
    # the result after the user message does not answer the call before it
    messages = [calls("a", "b", id="c"), results("a", id="r1"), user("u", id="u"), results("b", id="r2")]
    kept = whole_tool_pairs(messages, protected=set())
    assert ids(kept) == ["c", "r1", "u"]
    assert [p.tool_call_id for p in kept[0].tool_calls] == ["a"]


def test_protected_messages_are_never_changed():
    call = calls("a", "b", id="c")
    orphan = results("z", id="r")
    assert whole_tool_pairs([call], protected={"c"}) == [call]
    assert whole_tool_pairs([orphan], protected={"r"}) == [orphan]
    # a protected call keeps its whole run answered, even results that are loaded
    loaded_result = results("a", id="r1")
    assert whole_tool_pairs([call, loaded_result], protected={"c"}) == [call, loaded_result]
    # a protected result after an unprotected call: the call keeps only what is answered
    kept = whole_tool_pairs([calls("a", "b", id="c"), results("a", id="r1")], protected={"r1"})
    assert [p.tool_call_id for p in kept[0].tool_calls] == ["a"]
    assert kept[1].id == "r1"


def test_plain_assistant_and_user_messages_pass_through():
    messages = [system("s", id="s"), user("u", id="u"), assistant("a", id="a")]
    assert whole_tool_pairs(messages, protected=set()) == messages


# --- unanswered_calls --------------------------------------------------------------------------------


def test_unanswered_calls_by_index():
    messages = [
        user("q", id="u"),
        calls("a", "b", id="c1"),
        results("a", id="r1"),
        calls("d", id="c2"),
        results("d", id="r2"),
        assistant("done", id="a"),
        calls("e", id="c3"),
    ]
    assert unanswered_calls(messages) == {1: ["b"], 6: ["e"]}
    assert unanswered_calls(messages[:1]) == {}


def test_only_assistant_messages_are_asked_for_answers():
    odd = Message.create("user", [TextPart("see"), ToolCallPart("u1", "search", {})], id="u")
    assert unanswered_calls([odd, user("next", id="n")]) == {}


def test_a_result_after_another_message_does_not_answer():
    messages = [calls("a", id="c"), user("u", id="u"), results("a", id="r")]
    assert unanswered_calls(messages) == {0: ["a"]}
    messages = [calls("a", "b", id="c"), results("b", id="r1"), results("a", id="r2")]
    assert unanswered_calls(messages) == {}


# --- echoed_prefix -------------------------------------------------------------------------------------


def test_a_resent_conversation_is_recognised_by_role_text_and_tool_ids():
    stored = [user("hi"), assistant("hello"), user("how are you?"), assistant("fine")]
    resent = [user("how are you? "), assistant(" fine"), user("and you?")]
    assert echoed_prefix(resent, stored) == 2
    # the whole stored thread resent
    assert (
        echoed_prefix(
            [*[user(m.text) if m.role == "user" else assistant(m.text) for m in stored], user("x")], stored
        )
        == 4
    )


def test_every_prefix_length_is_tried_longest_first():
    stored = [user("s0"), assistant("s1"), user("s2")]
    resent = [assistant("s1"), user("s2"), assistant("reply"), user("new")]
    assert echoed_prefix(resent, stored) == 2


def test_the_last_input_message_is_always_new():
    stored = [user("hi"), assistant("hello")]
    assert echoed_prefix([user("hi"), assistant("hello")], stored) == 0
    assert echoed_prefix([assistant("hello"), user("again")], stored) == 1
    assert echoed_prefix([user("only")], stored) == 0
    assert echoed_prefix([], stored) == 0


def test_the_prefix_must_match_the_newest_stored_messages():
    stored = [user("hi"), assistant("hello"), user("bye")]
    assert echoed_prefix([user("hi"), assistant("hello"), user("new")], stored) == 0
    assert echoed_prefix([user("bye"), user("new")], stored) == 1
    assert echoed_prefix([user("bye"), user("new")], []) == 0


def test_longer_input_than_stored_compares_only_what_is_stored():
    stored = [assistant("hello")]
    assert echoed_prefix([assistant("hello"), user("a"), user("b")], stored) == 1


def test_what_makes_messages_different():
    stored = [tool_call("c1", id="x"), tool_result("c1", id="y")]
    assert echoed_prefix([tool_call("c1"), tool_result("c1"), user("next")], stored) == 2
    assert echoed_prefix([tool_call("c2"), tool_result("c1"), user("next")], stored) == 0
    assert echoed_prefix([tool_result("c2"), user("next")], stored) == 0
    assert echoed_prefix([assistant("hello"), user("next")], [user("hello")]) == 0
    assert echoed_prefix([user("hello!"), user("next")], [user("hello")]) == 0
