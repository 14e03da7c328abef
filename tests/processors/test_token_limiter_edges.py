"""TokenLimiter at its edges: the exact wording of its errors and aborts, the counts it shows in
`turn.info.tokens`, the output limit at an exact fit and at a cut, and truncate_to_tokens with
tokens longer than 16 characters or characters that cost several tokens."""

from __future__ import annotations

import re
from typing import Any

import pytest

from memproc.events import StreamEvent
from memproc.exceptions import ConfigurationError, TripWire
from memproc.messages import Message, TextPart, ToolCallPart, ToolResultPart
from memproc.processors.base import ProcessorContext
from memproc.processors.token_limiter import TokenLimiter, tool_call_groups, truncate_to_tokens
from memproc.processors.turn import Turn
from memproc.processors.turn_info import TokenCount

from .conftest import StubCounter, assistant, ids, make_ctx, system, tool_call, tool_result, user


def exactly(text: str) -> str:
    return f"^{re.escape(text)}$"


def limiter(limit: int, **kwargs: Any) -> TokenLimiter:
    kwargs.setdefault("counter", StubCounter())
    return TokenLimiter(limit, **kwargs)


def with_turn(ctx: ProcessorContext) -> ProcessorContext:
    ctx.turn = Turn(agent=None, thread_id="t1", resource_id="user-1", store=None, input_messages=[])
    return ctx


def history(n: int, tokens: int = 10) -> list[Message]:
    return [(user if i % 2 == 0 else assistant)(f"message {i}", id=f"h{i}", tokens=tokens) for i in range(n)]


def delta(text: str) -> StreamEvent:
    return StreamEvent(type="text-delta", text=text)


# --- options ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [0, -1, "100", True, 10.5, None])
def test_a_bad_limit_is_an_error_that_shows_the_value(bad):
    with pytest.raises(
        ConfigurationError, match=exactly(f"TokenLimiter(limit=...) must be a positive int, not {bad!r}")
    ):
        TokenLimiter(bad)


@pytest.mark.parametrize("bad", [0, -3, "5", False, 2.5])
def test_a_bad_output_limit_is_an_error_that_shows_the_value(bad):
    message = f"TokenLimiter(output_limit=...) must be a positive int, not {bad!r}"
    with pytest.raises(ConfigurationError, match=exactly(message)):
        TokenLimiter(100, output_limit=bad)


@pytest.mark.parametrize("bad", ["cut", "", "TRUNCATE", None])
def test_a_bad_output_strategy_is_an_error_that_lists_the_strategies(bad):
    message = f"TokenLimiter(output_strategy=...) must be one of truncate, abort, not {bad!r}"
    with pytest.raises(ConfigurationError, match=exactly(message)):
        TokenLimiter(100, output_strategy=bad)


def test_a_bad_counter_is_an_error_that_names_token_limiter():
    message = 'TokenLimiter(counter=...) must be a token counter, a dotted path, or {"CLASS": ..., "OPTIONS": {...}}'
    with pytest.raises(ConfigurationError, match=exactly(message)):
        TokenLimiter(100, counter=object())


def test_the_smallest_limits_and_both_strategies_are_accepted():
    processor = TokenLimiter(1, output_limit=1, output_strategy="abort")
    assert (processor.limit, processor.output_limit, processor.output_strategy) == (1, 1, "abort")
    default = TokenLimiter(5)
    assert (default.output_limit, default.output_strategy, default.counter) == (None, "truncate", None)
    assert TokenLimiter(5, output_strategy="truncate").output_strategy == "truncate"


def test_repr_shows_both_limits():
    assert repr(TokenLimiter(100)) == "TokenLimiter(100, output_limit=None)"
    assert repr(TokenLimiter(100, output_limit=20)) == "TokenLimiter(100, output_limit=20)"


# --- input: the reply's priming and the counts shown -----------------------------------------------


def test_the_reply_is_primed_with_three_tokens():
    assert TokenLimiter.reply_tokens == 3
    ctx = with_turn(make_ctx([], [user("q", id="new", tokens=10)]))
    assert limiter(13).process_input(ctx) is None  # 10 + 3: an exact fit
    assert ctx.turn.info.tokens == TokenCount(total=13, limit=13, dropped=0)


def test_turn_info_shows_the_total_the_limit_and_the_messages_dropped():
    ctx = with_turn(make_ctx(history(5), [user("now", id="new", tokens=10)]))
    result = limiter(43).process_input(ctx)
    assert ids(result) == ["h2", "h3", "h4", "new"]
    assert ctx.turn.info.as_dict()["tokens"] == {"total": 43, "limit": 43, "dropped": 2}
    assert (ctx.state["tokens"], ctx.state["dropped"]) == (43, 2)


def test_dropped_counts_messages_not_pairs():
    loaded = [tool_call("c1", id="call", tokens=10), tool_result("c1", id="result", tokens=10)]
    ctx = with_turn(make_ctx(loaded, [user("next", id="new", tokens=10)]))
    assert ids(limiter(13).process_input(ctx)) == ["new"]
    assert ctx.turn.info.tokens == TokenCount(total=13, limit=13, dropped=2)


def test_turn_info_keeps_the_most_dropped_for_one_call_across_steps():
    processor = limiter(33)
    state: dict[str, Any] = {}
    first = with_turn(make_ctx(history(4), [user("now", id="new", tokens=10)], state=state))
    assert ids(processor.process_input(first)) == ["h2", "h3", "new"]
    assert first.turn.info.tokens.dropped == 2
    # The next call sees the trimmed prompt: nothing more to drop, but the turn dropped two.
    second = make_ctx(history(4)[2:], [user("now", id="new", tokens=10)], state=state)
    second.turn, second.step = first.turn, 1
    assert processor.process_input_step(second) is None
    assert first.turn.info.tokens == TokenCount(total=33, limit=33, dropped=2)
    assert state["dropped"] == 2


def test_a_new_message_costing_exactly_the_rest_of_the_limit_is_no_abort():
    ctx = make_ctx([], [user("q", id="new", tokens=17)], system_messages=[system("s", tokens=10)])
    assert limiter(30).process_input(ctx) is None
    assert ctx.state["tokens"] == 30


def test_the_abort_reason_states_every_number():
    ctx = make_ctx(history(2), [user("q", id="new", tokens=50)], system_messages=[system("s", tokens=7)])
    reason = (
        "The input needs 60 tokens (7 in system messages, 50 in the new messages) but the token limit "
        "is 59; dropping older history cannot make it fit. Shorten the input or the instructions, "
        "or raise the limit."
    )
    with pytest.raises(TripWire, match=exactly(reason)) as caught:
        limiter(59).process_input(ctx)
    assert caught.value.metadata == {
        "limit": 59,
        "tokens": 60,
        "system_tokens": 7,
        "input_tokens": 50,
        "step": 0,
    }
    assert caught.value.retry is False


def test_a_later_call_that_cannot_fit_names_this_turns_tool_calls():
    responses = [tool_call("c1", id="call", tokens=20), tool_result("c1", id="result", tokens=20)]
    ctx = make_ctx([], [user("q", id="new", tokens=10), *responses])
    ctx.step = 1
    reason = (
        "The input needs 53 tokens (0 in system messages, 50 in the new messages and this turn's tool "
        "calls) but the token limit is 40; dropping older history cannot make it fit. Shorten the "
        "input or the instructions, or raise the limit."
    )
    with pytest.raises(TripWire, match=exactly(reason)) as caught:
        limiter(40).process_input_step(ctx)
    assert caught.value.metadata["step"] == 1


def test_a_loaded_call_without_its_result_is_not_counted():
    # Memory loaded the call but not its result: the request leaves the call out, so does the count.
    loaded = [user("q", id="q", tokens=10), tool_call("c1", id="call", tokens=100)]
    ctx = with_turn(make_ctx(loaded, [user("next", id="new", tokens=10)]))
    result = limiter(23).process_input(ctx)
    assert result is None
    assert ctx.turn.info.tokens == TokenCount(total=23, limit=23, dropped=0)


def test_this_turns_own_call_is_counted_before_its_result_arrives():
    ctx = make_ctx([], [user("q", id="new", tokens=10), tool_call("c1", id="call", tokens=10)])
    ctx.step = 1
    with pytest.raises(TripWire):
        limiter(22).process_input_step(ctx)
    assert limiter(23).process_input_step(ctx) is None


# --- tool_call_groups ------------------------------------------------------------------------------


def test_a_message_answering_two_calls_joins_their_groups():
    first = tool_call("c1", id="first")
    second = tool_call("c2", id="second")
    both = Message.create("tool", [ToolResultPart("c1", "search", "a"), ToolResultPart("c2", "search", "b")])
    assert tool_call_groups([user("q"), first, second, both, user("x")]) == [[0], [1, 2, 3], [4]]


def test_parts_without_a_call_id_group_nothing():
    call = Message.create("assistant", [ToolCallPart("", "search", {})])
    result = Message.create("tool", [ToolResultPart("", "search", "ok")])
    assert tool_call_groups([call, result]) == [[0], [1]]
    assert tool_call_groups([]) == []


def test_groups_are_ordered_by_their_first_message():
    messages = [
        tool_call("c1"),
        tool_call("c2"),
        user("x"),
        tool_result("c2"),
        tool_result("c1"),
        tool_call("c3"),
        tool_result("c3"),
    ]
    assert tool_call_groups(messages) == [[0, 4], [1, 3], [2], [5, 6]]


# --- output: stream --------------------------------------------------------------------------------


def test_stream_text_that_fits_exactly_passes_even_with_abort():
    processor = limiter(1000, output_limit=5, output_strategy="abort")
    ctx = make_ctx(phase="stream", processor_id="token-limiter")
    part = delta("one two three four five")
    assert processor.process_output_stream(ctx, part) is part
    assert ctx.state["output_tokens"] == 5
    with pytest.raises(
        TripWire, match=exactly("The response exceeded the output limit of 5 tokens (6 tokens).")
    ):
        processor.process_output_stream(ctx, delta(" six"))


def test_stream_abort_counts_what_came_before():
    processor = limiter(1000, output_limit=4, output_strategy="abort")
    ctx = make_ctx(phase="stream")
    processor.process_output_stream(ctx, delta("one two three"))
    reason = "The response exceeded the output limit of 4 tokens (6 tokens)."
    with pytest.raises(TripWire, match=exactly(reason)) as caught:
        processor.process_output_stream(ctx, delta(" four five six"))
    assert caught.value.metadata == {"limit": 4, "tokens": 6}


def test_stream_cut_with_room_left_keeps_what_fits_and_the_parts_other_fields():
    processor = limiter(1000, output_limit=4)
    ctx = make_ctx(phase="stream")
    processor.process_output_stream(ctx, delta("one two"))
    part = StreamEvent(type="text-delta", text=" three four five", usage={"n": 1}, finish_reason="x")
    cut = processor.process_output_stream(ctx, part)
    assert cut.text.rstrip() == " three four"
    assert (cut.type, cut.usage, cut.finish_reason) == ("text-delta", {"n": 1}, "x")
    assert (ctx.state["output_tokens"], ctx.state["output_truncated"]) == (4, True)


def test_stream_text_after_an_exact_fit_is_dropped_and_ends_the_text():
    processor = limiter(1000, output_limit=2)
    ctx = make_ctx(phase="stream")
    assert processor.process_output_stream(ctx, delta("one two")).text == "one two"
    assert "output_truncated" not in ctx.state
    assert processor.process_output_stream(ctx, delta(" three")) is None
    assert ctx.state["output_truncated"] is True
    assert ctx.state["output_tokens"] == 2


def test_stream_empty_deltas_pass_untouched_even_after_a_cut():
    processor = limiter(1000, output_limit=1)
    ctx = make_ctx(phase="stream")
    processor.process_output_stream(ctx, delta("one two"))
    empty = delta("")
    assert processor.process_output_stream(ctx, empty) is empty
    assert processor.process_output_stream(ctx, delta("three")) is None


def test_stream_free_text_within_the_limit_is_passed():
    processor = limiter(1000, output_limit=1)
    ctx = make_ctx(phase="stream")
    spaces = delta("   ")  # no words: the stub counts it as nothing
    assert processor.process_output_stream(ctx, spaces) is spaces
    assert ctx.state["output_tokens"] == 0


# --- output: result --------------------------------------------------------------------------------


def test_result_an_exact_fit_is_unchanged_even_with_abort():
    processor = limiter(1000, output_limit=3, output_strategy="abort")
    ctx = make_ctx([], [user("q"), assistant("one two three", id="a")], phase="output")
    assert processor.process_output_result(ctx) is None
    assert ctx.state["output_tokens"] == 3
    assert "output_truncated" not in ctx.state


def test_result_abort_counts_the_earlier_messages_too():
    processor = limiter(1000, output_limit=3, output_strategy="abort")
    ctx = make_ctx([], [assistant("one two", id="a"), assistant("three four", id="b")], phase="output")
    reason = "The response exceeded the output limit of 3 tokens (4 tokens)."
    with pytest.raises(TripWire, match=exactly(reason)) as caught:
        processor.process_output_result(ctx)
    assert caught.value.metadata == {"limit": 3, "tokens": 4}


def test_result_a_cut_with_room_left_keeps_what_fits_of_the_later_message():
    processor = limiter(1000, output_limit=3)
    first = assistant("one two", id="a")
    ctx = make_ctx([], [first, assistant("three four five", id="b")], phase="output")
    result = processor.process_output_result(ctx)
    assert result[0] is first
    assert result[1].id == "b" and result[1].text.rstrip() == "three"
    assert (ctx.state["output_tokens"], ctx.state["output_truncated"]) == (3, True)


def test_result_a_text_part_after_a_tool_call_is_cut_and_the_call_kept():
    processor = limiter(1000, output_limit=3)
    call = ToolCallPart("c1", "search", {})
    message = Message.create(
        "assistant", [TextPart("one two"), call, TextPart("three four"), TextPart("five")], id="a"
    )
    ctx = make_ctx([], [message], phase="output")
    [result] = processor.process_output_result(ctx)
    assert result.parts[:2] == (TextPart("one two"), call)
    assert [p.text.rstrip() for p in result.parts[2:]] == ["three"]
    assert ctx.state["output_tokens"] == 3


def test_result_text_after_the_cut_goes_but_later_tool_calls_stay():
    processor = limiter(1000, output_limit=2)
    call = ToolCallPart("c1", "search", {})
    message = Message.create("assistant", [TextPart("one two"), call, TextPart("three")], id="a")
    later = Message.create("assistant", [TextPart("four"), ToolCallPart("c2", "search", {})], id="b")
    ctx = make_ctx([], [message, tool_result("c1"), later], phase="output")
    result = processor.process_output_result(ctx)
    assert result[0].parts == (TextPart("one two"), call)
    assert result[2].parts == (ToolCallPart("c2", "search", {}),)
    assert ctx.state["output_tokens"] == 2 and ctx.state["output_truncated"] is True


def test_result_leaves_the_turns_tool_messages_alone():
    processor = limiter(1000, output_limit=1)
    answer = tool_result("c1", result="a long result with many words")
    ctx = make_ctx([], [tool_call("c1"), answer], phase="output")
    assert processor.process_output_result(ctx) is None
    assert ctx.state["output_tokens"] == 0


# --- truncate_to_tokens ----------------------------------------------------------------------------


class LongTokens:
    """One token per 20 characters (rounded up): tokens longer than the 16-character first guess."""

    def count_text(self, text: str) -> int:
        return -(-len(text) // 20)


class CostlyCharacters:
    """One token per character, three for "é"."""

    def count_text(self, text: str) -> int:
        return sum(3 if ch == "é" else 1 for ch in text)

    def count_message(self, message: Message) -> int:
        return self.count_text(message.text)


def test_stream_after_a_cut_that_left_room_later_text_still_goes():
    # "aé" costs 4 of a limit of 3: the cut keeps "a" (1), and the text ends there even though
    # "b" (1) would fit in what is left.
    processor = TokenLimiter(1000, counter=CostlyCharacters(), output_limit=3)
    ctx = make_ctx(phase="stream")
    assert processor.process_output_stream(ctx, delta("aé")).text == "a"
    assert ctx.state["output_tokens"] == 1
    assert processor.process_output_stream(ctx, delta("b")) is None


def test_result_after_a_cut_that_left_room_later_text_still_goes():
    processor = TokenLimiter(1000, counter=CostlyCharacters(), output_limit=3)
    first = Message.create("assistant", [TextPart("aé"), TextPart("b")], id="first")
    second = assistant("c", id="second")
    ctx = make_ctx([], [first, second], phase="output")
    result = processor.process_output_result(ctx)
    assert ids(result) == ["first"]
    assert result[0].parts == (TextPart("a"),)
    assert (ctx.state["output_tokens"], ctx.state["output_truncated"]) == (1, True)


@pytest.mark.parametrize(("budget", "length"), [(1, 20), (2, 40), (3, 60), (4, 80), (5, 100), (6, 100)])
def test_truncate_with_tokens_longer_than_sixteen_characters(budget, length):
    assert truncate_to_tokens(LongTokens(), "x" * 100, budget) == "x" * length


@pytest.mark.parametrize(
    ("text", "budget", "expected"),
    [
        ("éabc", 1, ""),
        ("éabc", 2, ""),
        ("éabc", 3, "é"),
        ("éabc", 4, "éa"),
        ("aébc", 2, "a"),
        ("aébc", 3, "a"),
        ("aébc", 4, "aé"),
        ("abcdé", 5, "abcd"),
        ("abcdé", 7, "abcdé"),
    ],
)
def test_truncate_with_characters_that_cost_several_tokens(text, budget, expected):
    assert truncate_to_tokens(CostlyCharacters(), text, budget) == expected


def test_truncate_returns_text_that_fits_exactly_whole():
    assert truncate_to_tokens(StubCounter(), "one two", 2) == "one two"
    assert truncate_to_tokens(CostlyCharacters(), "a" * 40, 40) == "a" * 40
    assert truncate_to_tokens(CostlyCharacters(), "a" * 40, 39) == "a" * 39


def test_truncate_to_nothing_is_empty_even_for_free_text():
    assert truncate_to_tokens(StubCounter(), "   ", 0) == ""
    assert truncate_to_tokens(StubCounter(), "one", -1) == ""
    assert truncate_to_tokens(StubCounter(), "", 5) == ""


def test_truncate_finds_the_longest_prefix_on_long_text():
    text = "".join("é" if i % 7 == 3 else "a" for i in range(500))
    counter = CostlyCharacters()
    for budget in (1, 2, 3, 10, 31, 32, 33, 100, 300):
        prefix = truncate_to_tokens(counter, text, budget)
        assert text.startswith(prefix)
        assert counter.count_text(prefix) <= budget < counter.count_text(text[: len(prefix) + 1])


def test_result_the_limit_is_for_all_the_texts_together_not_each_one():
    """Three messages of two tokens each fit a limit of 5 one by one, not together: the third is cut."""
    processor = limiter(1000, output_limit=5)
    messages = [assistant("one two", id="a"), assistant("three four", id="b"), assistant("five six", id="c")]
    ctx = make_ctx([], messages, phase="output")
    result = processor.process_output_result(ctx)
    assert [m.text.rstrip() for m in result] == ["one two", "three four", "five"]
    assert (ctx.state["output_tokens"], ctx.state["output_truncated"]) == (5, True)
