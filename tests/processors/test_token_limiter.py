"""TokenLimiter: the prompt budget on input, the response cap on output (Mastra's cases, translated)."""

from __future__ import annotations

import dataclasses

import pytest
from django.test import override_settings

from memproc.events import StreamEvent
from memproc.exceptions import ConfigurationError, TripWire
from memproc.messages import Message, TextPart, ToolCallPart
from memproc.processors.token_limiter import TokenLimiter, tool_call_groups, truncate_to_tokens
from memproc.processors.tokens import CharEstimateCounter, reset_token_counters

from .conftest import StubCounter, assistant, ids, make_ctx, system, tool_call, tool_result, user

R = TokenLimiter.reply_tokens


def limiter(limit: int, **kwargs) -> TokenLimiter:
    kwargs.setdefault("counter", StubCounter())
    return TokenLimiter(limit, **kwargs)


def history(n: int, tokens: int = 10) -> list[Message]:
    return [(user if i % 2 == 0 else assistant)(f"message {i}", id=f"h{i}", tokens=tokens) for i in range(n)]


# --- input: what fits stays -----------------------------------------------------------------------


def test_returns_none_and_records_the_count_when_everything_fits():
    ctx = make_ctx(history(3), [user("hi", id="new", tokens=5)])
    assert limiter(100).process_input(ctx) is None
    assert ctx.state["tokens"] == 35 + R
    assert ctx.state["dropped"] == 0


def test_drops_the_oldest_history_first():
    ctx = make_ctx(history(5), [user("now", id="new", tokens=10)])
    result = limiter(40 + R).process_input(ctx)
    assert ids(result) == ["h2", "h3", "h4", "new"]
    assert ctx.state["tokens"] == 40 + R
    assert ctx.state["dropped"] == 2


def test_keeps_dropping_until_it_fits_exactly_at_the_limit():
    ctx = make_ctx(history(4), [user("now", id="new", tokens=10)])
    assert ids(limiter(30 + R).process_input(ctx)) == ["h2", "h3", "new"]
    ctx = make_ctx(history(4), [user("now", id="new", tokens=10)])
    assert ids(limiter(29 + R).process_input(ctx)) == ["h3", "new"]


def test_system_messages_count_against_the_limit_and_are_never_dropped():
    instructions = system("You are helpful.", tokens=20)
    ctx = make_ctx(history(4), [user("now", id="new", tokens=10)], system_messages=[instructions])
    result = limiter(50 + R).process_input(ctx)
    assert ids(result) == ["h2", "h3", "new"]
    assert ctx.state["tokens"] == 20 + 30 + R
    assert list(ctx.system_messages) == [instructions]


def test_a_system_message_in_the_list_is_kept_wherever_it_is():
    note = system("remembered from another conversation", id="note", tokens=10)
    loaded = [note, *history(3)]
    ctx = make_ctx(loaded, [user("now", id="new", tokens=10)])
    assert ids(limiter(30 + R).process_input(ctx)) == ["note", "h2", "new"]


def test_keeps_all_of_the_new_input_even_when_all_history_goes():
    new = [user("first", id="n1", tokens=10), user("second", id="n2", tokens=10)]
    ctx = make_ctx(history(3), new)
    assert ids(limiter(20 + R).process_input(ctx)) == ["n1", "n2"]
    assert ctx.state["tokens"] == 20 + R


def test_with_no_memory_everything_is_new_input_and_nothing_is_dropped():
    ctx = make_ctx([], [user("a", id="a", tokens=10), assistant("b", id="b", tokens=10)])
    assert limiter(20 + R).process_input(ctx) is None


# --- input: tool calls and results go together ----------------------------------------------------


def test_drops_a_tool_call_and_its_result_together():
    loaded = [
        tool_call("c1", id="call", tokens=10),
        tool_result("c1", id="result", tokens=10),
        assistant("it is sunny", id="answer", tokens=10),
    ]
    ctx = make_ctx(loaded, [user("thanks", id="new", tokens=10)])
    # Room for the answer and one more message: the call alone would fit, but not without its result.
    result = limiter(30 + R).process_input(ctx)
    assert ids(result) == ["answer", "new"]


def test_a_result_whose_call_is_dropped_goes_too_even_if_it_is_cheap():
    loaded = [
        user("weather?", id="q", tokens=10),
        tool_call("c1", id="call", tokens=30),
        tool_result("c1", id="result", tokens=1),
    ]
    ctx = make_ctx(loaded, [user("and tomorrow?", id="new", tokens=10)])
    result = limiter(15 + R).process_input(ctx)
    assert ids(result) == ["new"]
    assert not any(m.role == "tool" for m in result)


def test_a_call_with_several_results_is_one_group():
    call = Message.create(
        "assistant",
        [ToolCallPart("c1", "a", {}), ToolCallPart("c2", "b", {})],
        id="call",
        metadata={"tokens": 5},
    )
    loaded = [call, tool_result("c1", "a", id="r1", tokens=5), tool_result("c2", "b", id="r2", tokens=5)]
    loaded.append(assistant("done", id="done", tokens=5))
    ctx = make_ctx(loaded, [user("ok", id="new", tokens=5)])
    assert ids(limiter(15 + R).process_input(ctx)) == ["done", "new"]


def test_a_past_call_answered_by_the_new_input_is_kept():
    # A client ran the tool itself and sends the result as this turn's input.
    loaded = [user("old", id="old", tokens=10), tool_call("c1", id="call", tokens=10)]
    ctx = make_ctx(loaded, [tool_result("c1", id="result", tokens=10)])
    assert ids(limiter(20 + R).process_input(ctx)) == ["call", "result"]


def test_tool_call_groups():
    messages = [
        user("q"),
        tool_call("c1"),
        tool_result("c1"),
        tool_call("c2"),
        assistant("x"),
        tool_result("c2"),
    ]
    assert tool_call_groups(messages) == [[0], [1, 2], [3, 5], [4]]


# --- input: aborts --------------------------------------------------------------------------------


def test_aborts_with_a_clear_reason_when_the_new_input_alone_cannot_fit():
    ctx = make_ctx(history(2), [user("a long question", id="new", tokens=50)], processor_id="token-limiter")
    with pytest.raises(TripWire) as caught:
        limiter(40).process_input(ctx)
    error = caught.value
    assert error.processor_id == "token-limiter"
    assert "token limit is 40" in error.reason
    assert f"needs {50 + R} tokens" in error.reason
    assert error.metadata == {
        "limit": 40,
        "tokens": 50 + R,
        "system_tokens": 0,
        "input_tokens": 50,
        "step": 0,
    }
    assert error.retry is False


def test_aborts_when_system_messages_alone_exceed_the_limit():
    ctx = make_ctx([], [user("hi", id="new", tokens=1)], system_messages=[system("huge", tokens=100)])
    with pytest.raises(TripWire) as caught:
        limiter(50).process_input(ctx)
    assert caught.value.metadata["system_tokens"] == 100
    assert "100 in system messages" in caught.value.reason


# --- input: real counts, no mutation, the configured counter --------------------------------------


def test_with_quicktok_the_recorded_count_is_the_sum_of_message_counts(o200k):
    loaded = [user(f"old message number {i} " * 5, id=f"h{i}") for i in range(6)]
    new = [user("What did I say first?", id="new")]
    instructions = system("You are a helpful assistant.")
    per_message = o200k.count_message(loaded[0])
    limit = o200k.count_message(instructions) + o200k.count_message(new[0]) + 3 * per_message + R
    ctx = make_ctx(loaded, new, system_messages=[instructions])
    result = TokenLimiter(limit, counter=o200k).process_input(ctx)
    assert ids(result) == ["h3", "h4", "h5", "new"]
    assert ctx.state["tokens"] == limit


def test_never_mutates_its_input():
    loaded = history(4)
    ctx = make_ctx(loaded, [user("now", id="new", tokens=10)])
    before = list(ctx.messages)
    result = limiter(20 + R).process_input(ctx)
    assert result is not ctx.messages
    assert list(ctx.messages) == before
    assert all(a is b for a, b in zip(result, [before[-2], before[-1]], strict=True))
    with pytest.raises(dataclasses.FrozenInstanceError):
        before[0].parts = ()


def test_uses_the_configured_counter_at_run_time():
    reset_token_counters()
    tokenizer = {"CLASS": "memproc.processors.tokens.CharEstimateCounter", "OPTIONS": {"chars_per_token": 1}}
    processor = TokenLimiter(4000)  # built before the setting changes: read at use time
    with override_settings(MEMPROC={"TOKENIZER": tokenizer}):
        assert isinstance(processor.get_counter(), CharEstimateCounter)
        ctx = make_ctx([], [user("x" * 10, id="new")])
        processor.process_input(ctx)
        assert ctx.state["tokens"] == 10 + 4 + R


def test_a_counter_can_be_named_by_dotted_path():
    processor = TokenLimiter(100, counter="memproc.processors.tokens.CharEstimateCounter")
    assert isinstance(processor.get_counter(), CharEstimateCounter)


# --- options --------------------------------------------------------------------------------------


def test_limit_is_positional_like_mastra():
    assert TokenLimiter(4000).limit == 4000
    assert TokenLimiter(limit=10).limit == 10
    assert TokenLimiter.id == "token-limiter"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"limit": 0},
        {"limit": -5},
        {"limit": "100"},
        {"limit": True},
        {"limit": 10.5},
        {"limit": 100, "output_limit": 0},
        {"limit": 100, "output_limit": "5"},
        {"limit": 100, "output_strategy": "cut"},
        {"limit": 100, "counter": object()},
    ],
)
def test_bad_options_are_configuration_errors(kwargs):
    with pytest.raises(ConfigurationError):
        TokenLimiter(**kwargs)


def test_other_options_are_keyword_only():
    with pytest.raises(TypeError):
        TokenLimiter(100, None)


# --- output: stream -------------------------------------------------------------------------------


def delta(text: str) -> StreamEvent:
    return StreamEvent(type="text-delta", text=text)


def test_stream_passes_parts_within_the_limit_and_counts_them():
    processor = limiter(1000, output_limit=10)
    ctx = make_ctx(phase="stream")
    part = delta("one two three")
    assert processor.process_output_stream(ctx, part) is part
    assert ctx.state["output_tokens"] == 3


def test_stream_truncate_cuts_the_crossing_part_and_drops_later_text():
    processor = limiter(1000, output_limit=5)
    ctx = make_ctx(phase="stream")
    assert processor.process_output_stream(ctx, delta("one two three")).text == "one two three"
    cut = processor.process_output_stream(ctx, delta(" four five six seven"))
    assert cut.type == "text-delta"
    assert cut.text.rstrip() == " four five"  # the stub counts words: a trailing space is free
    assert ctx.state["output_tokens"] == 5
    assert processor.process_output_stream(ctx, delta(" eight")) is None
    assert processor.process_output_stream(ctx, delta(" nine")) is None


def test_stream_truncation_with_a_real_tokenizer_stays_within_the_limit(o200k):
    processor = TokenLimiter(1000, counter=o200k, output_limit=8)
    ctx = make_ctx(phase="stream")
    emitted = ""
    for word in ("The quick brown fox", " jumps over the lazy dog", " and runs far away", " into the woods"):
        part = processor.process_output_stream(ctx, delta(word))
        emitted += part.text if part else ""
    assert emitted.startswith("The quick brown fox jumps")
    assert o200k.count_text(emitted) <= 8
    assert ctx.state["output_tokens"] <= 8


def test_stream_never_withholds_tool_calls_results_or_finish():
    processor = limiter(1000, output_limit=2)
    ctx = make_ctx(phase="stream")
    processor.process_output_stream(ctx, delta("far too many words here"))
    for kind in ("tool-call", "tool-result", "finish"):
        part = StreamEvent(type=kind)
        assert processor.process_output_stream(ctx, part) is part


def test_stream_abort_strategy_raises_a_tripwire():
    processor = limiter(1000, output_limit=5, output_strategy="abort")
    ctx = make_ctx(phase="stream", processor_id="token-limiter")
    assert processor.process_output_stream(ctx, delta("one two")) is not None
    with pytest.raises(TripWire) as caught:
        processor.process_output_stream(ctx, delta(" three four five six"))
    assert "output limit of 5 tokens" in caught.value.reason
    assert caught.value.metadata == {"limit": 5, "tokens": 6}


def test_without_an_output_limit_output_passes_untouched():
    processor = limiter(10)
    ctx = make_ctx(phase="stream")
    part = delta("word " * 100)
    assert processor.process_output_stream(ctx, part) is part
    assert ctx.state == {}
    out = make_ctx([], [user("q"), assistant("word " * 100)], phase="output")
    assert processor.process_output_result(out) is None


# --- output: result -------------------------------------------------------------------------------


def test_result_truncates_the_assistant_text():
    processor = limiter(1000, output_limit=3)
    question = user("tell me a story")
    answer = assistant("once upon a time there was", id="answer")
    ctx = make_ctx([], [question, answer], phase="output")
    result = processor.process_output_result(ctx)
    assert result[0] is question
    assert result[1].id == "answer"
    assert result[1].text.rstrip() == "once upon a"
    assert ctx.state["output_tokens"] == 3
    assert answer.text == "once upon a time there was"


def test_result_limit_spans_the_turns_assistant_messages_and_keeps_tool_calls():
    processor = limiter(1000, output_limit=4)
    first = Message.create("assistant", [TextPart("let me check"), ToolCallPart("c1", "search", {})])
    second = assistant("the answer is forty two", id="final")
    ctx = make_ctx([], [user("q"), first, tool_result("c1"), second], phase="output")
    result = processor.process_output_result(ctx)
    assert result[1].text == "let me check"
    assert result[1].tool_calls == first.tool_calls
    assert result[3].text.rstrip() == "the"


def test_result_drops_an_assistant_message_left_with_nothing():
    processor = limiter(1000, output_limit=2)
    ctx = make_ctx([], [assistant("one two", id="a"), assistant("three four", id="b")], phase="output")
    assert ids(processor.process_output_result(ctx)) == ["a"]


def test_result_leaves_loaded_history_alone():
    processor = limiter(1000, output_limit=2)
    old = assistant("a very long old answer from memory", id="old")
    ctx = make_ctx([old], [user("q"), assistant("ok", id="new")], phase="output")
    assert processor.process_output_result(ctx) is None


def test_result_abort_strategy_raises_a_tripwire():
    processor = limiter(1000, output_limit=3, output_strategy="abort")
    ctx = make_ctx([], [assistant("one two three four")], phase="output")
    with pytest.raises(TripWire) as caught:
        processor.process_output_result(ctx)
    assert caught.value.metadata == {"limit": 3, "tokens": 4}


def test_result_within_the_limit_returns_none():
    processor = limiter(1000, output_limit=10)
    ctx = make_ctx([], [user("q"), assistant("short answer")], phase="output")
    assert processor.process_output_result(ctx) is None
    assert ctx.state["output_tokens"] == 2


def test_truncate_to_tokens(o200k):
    text = "The quick brown fox jumps over the lazy dog. " * 50
    for budget in (1, 5, 17, 100):
        prefix = truncate_to_tokens(o200k, text, budget)
        assert text.startswith(prefix)
        assert o200k.count_text(prefix) <= budget
        assert o200k.count_text(text[: len(prefix) + 1]) > budget
    assert truncate_to_tokens(o200k, text, 0) == ""
    assert truncate_to_tokens(o200k, "short", 10) == "short"
