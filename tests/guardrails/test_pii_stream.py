"""PIIDetector on the stream: values split across deltas are still caught, and nothing is lost.

`run_stream` behaves like a runner that passes the model's `finish` event through stream hooks and
accepts a list of parts back. The `repair` tests model a runner that does neither: the held tail
never reaches the stream, and `process_output_result` puts it back into the saved response.
"""

from __future__ import annotations

import pytest

from memproc.events import StreamEvent
from memproc.exceptions import TripWire
from memproc.guardrails import PIIDetector
from memproc.messages import Message, ToolResultPart

from .conftest import (
    SAMPLES,
    assistant,
    assistant_calling,
    make_ctx,
    run_stream,
    split_every,
    stream_ctx,
    streamed_text,
    system,
    user,
)


def redacted(text: str, **kwargs) -> str:
    guard = PIIDetector(**kwargs)
    return guard.redact(text, guard.detect(text))


@pytest.mark.parametrize("kind", SAMPLES)
def test_a_value_split_at_any_point_is_redacted_whole(kind):
    text = f"Sure, it is {SAMPLES[kind]} as you said."
    for cut in range(1, len(text)):
        events = run_stream(PIIDetector(), [text[:cut], text[cut:]])
        assert streamed_text(events) == redacted(text), (kind, cut)


@pytest.mark.parametrize("size", [1, 2, 3, 7])
def test_character_by_character_streams_are_redacted(size):
    text = "Mail ada@example.com, call +44 20 7946 0958, card 4111-1111-1111-1111; password: hunter2hunter2."
    events = run_stream(PIIDetector(), split_every(text, size))
    assert streamed_text(events) == redacted(text)
    assert "hunter2" not in streamed_text(events)


def test_emitted_text_is_always_a_prefix_of_the_redacted_text():
    text = "Contact ada.lovelace@example.com today."
    guard = PIIDetector()
    ctx = stream_ctx(make_ctx(phase="stream"))
    emitted = ""
    for piece in ["Contact ada", ".lovelace@exa", "mple.com to", "day."]:
        part = guard.process_output_stream(ctx, StreamEvent(type="text-delta", text=piece))
        emitted += part.text if part is not None else ""
        assert redacted(text).startswith(emitted)
        assert "ada" not in emitted


def test_prose_runs_at_most_one_word_behind():
    words = ["Hello", " there,", " how", " are", " you", " today?"]
    events = run_stream(PIIDetector(), words, finish=False)
    assert streamed_text(events) == "Hello there, how are you "


def test_finish_flushes_the_held_tail_as_one_delta_before_the_finish_event():
    events = run_stream(PIIDetector(), ["Write to", " ada@example.com"])
    assert [(e.type, e.text) for e in events] == [
        ("text-delta", "Write "),
        ("text-delta", "to "),
        ("text-delta", "[REDACTED:email]"),
        ("finish", ""),
    ]


def test_a_tool_call_ends_the_text_which_is_flushed_with_finish():
    events = run_stream(PIIDetector(), ["Looking up", " ada@example.com"], tool_call_id="c1")
    assert [e.type for e in events] == ["text-delta", "text-delta", "tool-call", "text-delta", "finish"]
    assert streamed_text(events) == "Looking up [REDACTED:email]"


def test_block_aborts_before_any_of_the_value_is_emitted():
    guard = PIIDetector(strategy="block")
    ctx = stream_ctx(make_ctx(phase="stream"))
    emitted = ""
    with pytest.raises(TripWire) as info:
        for piece in ["Your card is 4111 ", "1111 ", "1111 ", "1111", " ok", " fine"]:
            part = guard.process_output_stream(ctx, StreamEvent(type="text-delta", text=piece))
            emitted += part.text if part is not None else ""
    assert "4111" not in emitted
    assert info.value.metadata["counts"] == {"credit_card": 1}


def test_block_also_checks_the_tail_flushed_at_finish():
    with pytest.raises(TripWire):
        run_stream(PIIDetector(strategy="block"), ["mail ada@example.com"])


def test_warn_and_input_only_pass_parts_through_untouched():
    for guard in (PIIDetector(strategy="warn"), PIIDetector(phases="input")):
        ctx = stream_ctx(make_ctx(phase="stream"))
        part = StreamEvent(type="text-delta", text="ada@example.com")
        assert guard.process_output_stream(ctx, part) is part


def test_other_events_pass_through():
    guard = PIIDetector()
    ctx = stream_ctx(make_ctx(phase="stream"))
    part = StreamEvent(type="tool-result", tool_result=ToolResultPart("c1", "lookup", "ok"))
    assert guard.process_output_stream(ctx, part) is part


def test_custom_patterns_hold_a_fixed_window():
    guard = PIIDetector(types=["email"], patterns={"ticket": r"TICKET \d{3} \d{3}"})
    events = run_stream(guard, ["see TICKET 123", " 456 now"])
    assert streamed_text(events) == "see [REDACTED:ticket] now"


# --- a runner without the finish flush: repair on the result ---------------------------------------


def drive_without_finish(guard, deltas, ctx, *, tool_call_id=None):
    sctx = stream_ctx(ctx)
    emitted = []
    for piece in deltas:
        out = guard.process_output_stream(sctx, StreamEvent(type="text-delta", text=piece))
        if out is not None:
            emitted.append(out.text)
    if tool_call_id:
        from memproc.llm.types import ToolCall

        guard.process_output_stream(
            sctx, StreamEvent(type="tool-call", tool_call=ToolCall(tool_call_id, "x", {}))
        )
    return "".join(emitted)


def output_ctx(state, messages, *, history=(), system_messages=()):
    return make_ctx(history, messages, phase="output", state=state, system_messages=system_messages)


def test_result_repair_appends_the_tail_the_stream_never_emitted():
    guard = PIIDetector()
    state: dict = {}
    question = user("what is my mail?", id="q")
    emitted = drive_without_finish(
        guard, ["It is", " ada@example.com", " my", " friend."], make_ctx(state=state)
    )
    assert emitted == "It is [REDACTED:email] my "
    result = guard.process_output_result(output_ctx(state, [question, assistant(emitted, id="a")]))
    assert [m.id for m in result] == ["q", "a"]
    assert result[1].text == "It is [REDACTED:email] my friend."
    assert "stream" not in state


def test_result_repair_places_each_steps_tail_by_its_tool_call():
    guard = PIIDetector()
    state: dict = {}
    ctx = make_ctx(state=state)
    first = drive_without_finish(guard, ["Checking", " ada@example.com"], ctx, tool_call_id="c1")
    second = drive_without_finish(guard, ["Found", " it", " for", " you."], ctx)
    messages = [
        user("find me", id="q"),
        assistant_calling("c1", first, id="a1"),
        Message.create("tool", [ToolResultPart("c1", "lookup", "ok")], id="t1"),
        assistant(second, id="a2"),
    ]
    result = guard.process_output_result(output_ctx(state, messages))
    assert result[1].text == "Checking [REDACTED:email]"
    assert result[1].tool_calls[0].tool_call_id == "c1"
    assert result[3].text == "Found it for you."


def test_result_repair_creates_the_answer_when_all_of_it_was_held():
    guard = PIIDetector()
    state: dict = {}
    assert drive_without_finish(guard, ["ada@example.com"], make_ctx(state=state)) == ""
    result = guard.process_output_result(output_ctx(state, [user("mail?", id="q")]))
    assert [(m.role, m.text) for m in result] == [("user", "mail?"), ("assistant", "[REDACTED:email]")]
    assert result[1].thread_id == "t1" and result[1].created_at is not None


def test_no_repair_after_a_finish_flush():
    guard = PIIDetector()
    state: dict = {}
    events = run_stream(guard, ["It is", " ada@example.com"], ctx=make_ctx(state=state))
    answer = assistant(streamed_text(events), id="a")
    assert guard.process_output_result(output_ctx(state, [user("q"), answer])) is None


def test_a_retried_attempt_drops_what_the_rejected_draft_held():
    guard = PIIDetector()
    state: dict = {}
    drive_without_finish(guard, ["Rejected", " draft", " secret"], make_ctx(state=state))
    retry_ctx = make_ctx(state=state, system_messages=[system("[Processor Feedback] no")])
    events = run_stream(guard, ["Fresh", " answer"], ctx=retry_ctx)
    assert streamed_text(events) == "Fresh answer"
