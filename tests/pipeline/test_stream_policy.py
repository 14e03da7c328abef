"""Issue 38 item 1: `stream_policy` ("live" | "sentences" | "hold"), through `Agent.stream` and
`astream`: what reaches the caller of a stream, and when; the sentence splitter; which
combinations an agent refuses, and the explicit opt-in. (The HTTP protocols:
tests/api/test_stream_policy_protocols.py.)"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync

from memproc import Agent, Memory
from memproc.events import StreamEvent
from memproc.exceptions import ConfigurationError, ValidationError
from memproc.guardrails import MaxLength, ModerationProcessor, PIIDetector, SystemPromptScrubber
from memproc.llm.types import ModelRequest, ModelResponse, ToolCall
from memproc.models import Message as StoredMessage
from memproc.models import TripwireLog
from memproc.testing import ScriptedModel
from memproc.turns.stream_policy import complete_until

T, R = "t-policy", "user-policy"

CLEAN = "The first sentence is here. The second one follows it. And a last one ends the reply."
# The second sentence holds the blocked term; the first is clean, the third never matters.
BLOCKED = "Our office is open today. The vault code is Zanzibar forty two. Call us later."


class RecordingModel(ScriptedModel):
    """ScriptedModel (one chunk per word) that writes each text chunk it makes into `log` as
    ("model", text), so a test can tell what the caller received before the model had finished."""

    def __init__(self, log: list[tuple[str, str]], *responses: Any) -> None:
        super().__init__(responses, id="test/recording")
        self.log = log

    def stream(self, request: ModelRequest) -> Iterator[StreamEvent]:
        for event in super().stream(request):
            if event.type == "text-delta":
                self.log.append(("model", event.text))
            yield event


class BlockTerm:
    """A result-level output guardrail: blocks a response that contains `term`. It may judge the
    text so far, so it needs stream_policy="sentences"."""

    id = "block-term"
    needs_stream_policy = "sentences"

    def __init__(self, term: str = "Zanzibar", *, retry: bool = False) -> None:
        self.term, self.retry = term, retry

    def process_output_result(self, ctx: Any) -> None:
        if any(self.term in m.text for m in ctx.messages if m.role == "assistant"):
            ctx.abort("The reply holds a blocked term", retry=self.retry)


class JudgeWhole:
    """A result-level guardrail that can only judge the whole reply: it needs "hold"."""

    id = "judge-whole"
    needs_stream_policy = "hold"

    def process_output_result(self, ctx: Any) -> None:
        return None


def received(events: list[StreamEvent]) -> str:
    return "".join(e.text for e in events if e.type == "text-delta")


def run(agent: Agent, **options: Any) -> list[StreamEvent]:
    return list(agent.stream("hi", thread_id=T, resource_id=R, **options))


def read_logged(agent: Agent, log: list[tuple[str, str]], **options: Any) -> list[StreamEvent]:
    """Reads the stream one event at a time, writing each text delta into `log` as it arrives."""
    events = []
    for event in agent.stream("hi", thread_id=T, resource_id=R, **options):
        if event.type == "text-delta":
            log.append(("client", event.text))
        events.append(event)
    return events


def first(log: list[tuple[str, str]], who: str) -> int:
    return next(i for i, (w, _) in enumerate(log) if w == who)


def last(log: list[tuple[str, str]], who: str) -> int:
    return max(i for i, (w, _) in enumerate(log) if w == who)


def agent_with(model: Any, **kwargs: Any) -> Agent:
    kwargs.setdefault("memory", Memory(last_messages=10))
    return Agent(id="policy-agent", instructions="Test.", model=model, **kwargs)


# --- the sentence splitter ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "complete"),
    [
        ("Hello world. How are", "Hello world. "),
        ("Hello world!  And", "Hello world!  "),
        ("Really?! Yes", "Really?! "),
        ("Wait... what now", "Wait... "),
        ('He said "stop." Then left', 'He said "stop." '),
        ("It works (mostly.) Next", "It works (mostly.) "),
        ("**Done.** Next", "**Done.** "),
        ("你好。再见", "你好。"),
    ],
)
def test_a_sentence_ends_at_its_mark_and_the_space_after_it(text, complete):
    assert text[: complete_until(text)] == complete


@pytest.mark.parametrize(
    "text",
    [
        "Dr. Smith and Mr. Jones met",
        "Fruit, e.g. apples and i.e. pears",
        "The U.S. army and J. R. R. Tolkien",
        "Chapters 3 etc. and vs. the rest",
    ],
)
def test_abbreviations_and_initials_end_no_sentence(text):
    assert complete_until(text) == 0


def test_decimals_and_versions_end_no_sentence_but_a_number_before_a_space_does():
    assert complete_until("Pi is 3.14 and v2.0.1 is out") == 0
    text = "It costs 3.50 in 2024. Then"
    assert text[: complete_until(text)] == "It costs 3.50 in 2024. "


def test_a_line_break_ends_a_sentence_but_a_list_number_does_not():
    text = "Steps:\n1. Open the box\n2. Take"
    assert text[: complete_until(text)] == "Steps:\n1. Open the box\n"
    assert complete_until("Steps:\n1. Open") == len("Steps:\n")
    assert complete_until("First.\n\nSecond") == len("First.\n\n")


def test_text_with_no_end_yet_is_not_complete():
    assert complete_until("no end here") == 0
    assert complete_until("Ends here.") == 0  # "here.com" could still come
    assert complete_until("Ends here?") == 0


def test_the_search_starts_where_the_released_text_ends():
    text = "One. Two. Thr"
    assert complete_until(text, 5) == len("One. Two. ")
    assert complete_until(text, len("One. Two. ")) == len("One. Two. ")


# --- "sentences" ------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_sentences_release_no_byte_of_the_blocked_sentence():
    model = ScriptedModel([BLOCKED])
    events = run(agent_with(model, output_processors=[BlockTerm()], stream_policy="sentences"))
    assert received(events) == "Our office is open today. "
    assert [e.type for e in events][-1] == "tripwire"
    assert events[-1].tripwire.processor_id == "block-term" and events[-1].tripwire.phase == "output"
    streamed = received(events)
    assert not any(word in streamed for word in ("vault", "code", "Zanzibar", "forty", "two"))
    assert not StoredMessage.objects.exists()
    assert TripwireLog.objects.get().processor_id == "block-term"


@pytest.mark.django_db
def test_sentences_stream_the_first_sentence_before_the_model_has_finished():
    log: list[tuple[str, str]] = []
    model = RecordingModel(log, CLEAN)
    events = read_logged(agent_with(model, output_processors=[BlockTerm()]), log)
    assert first(log, "client") < last(log, "model")
    assert log[first(log, "client")] == ("client", "The")
    assert received(events) == CLEAN and events[-1].type == "finish"
    assert events[-1].result.text == CLEAN


@pytest.mark.django_db
def test_sentences_screen_the_text_so_far_before_each_release():
    seen: list[str] = []

    class Watch(BlockTerm):
        def process_output_result(self, ctx: Any) -> None:
            seen.append(" | ".join(m.text for m in ctx.messages))

    model = ScriptedModel(["One two. Three four. Five"])
    events = run(agent_with(model, output_processors=[Watch()]))
    assert received(events) == "One two. Three four. Five"
    # each sentence with the text before it, then the whole result once more at the end
    assert seen == ["One two. ", "One two. Three four. ", "One two. Three four. Five"]


@pytest.mark.django_db
def test_a_blocked_term_in_the_text_without_an_end_is_never_released():
    model = ScriptedModel(["All fine so far. Then Zanzibar with no end"])
    events = run(agent_with(model, output_processors=[BlockTerm()]))
    assert received(events) == "All fine so far. "
    assert events[-1].type == "tripwire"


@pytest.mark.django_db
def test_the_text_without_an_end_is_released_at_the_end_once_the_guardrails_passed():
    model = ScriptedModel(["One sentence. Then a tail without an end"])
    events = run(agent_with(model, output_processors=[BlockTerm()]))
    kinds = [e.type for e in events]
    assert received(events) == "One sentence. Then a tail without an end"
    assert kinds[-1] == "finish" and "tripwire" not in kinds
    assert (
        StoredMessage.objects.filter(role="assistant").get().text
        == "One sentence. Then a tail without an end"
    )


@pytest.mark.django_db
def test_sentences_release_a_steps_text_before_its_tool_call():
    def lookup(city: str) -> str:
        """Finds a city."""
        return "found"

    model = ScriptedModel(
        [
            ModelResponse(
                text="Let me look that up", tool_calls=[ToolCall("c1", "lookup", {"city": "Oslo"})]
            ),
            "It is in Norway. Zanzibar is not.",
        ]
    )
    events = run(agent_with(model, tools=[lookup], output_processors=[BlockTerm()]))
    kinds = [e.type for e in events]
    assert kinds[: kinds.index("tool-call")].count("text-delta") >= 1
    assert received(events) == "Let me look that upIt is in Norway. "
    assert kinds[-1] == "tripwire"


@pytest.mark.django_db
def test_a_retried_draft_keeps_what_it_held_and_the_new_attempt_streams():
    model = ScriptedModel(["Fine. But Zanzibar. More", "A clean answer."])
    agent = agent_with(model, output_processors=[BlockTerm(retry=True)], max_processor_retries=1)
    events = run(agent)
    kinds = [e.type for e in events]
    retry = kinds.index("retry")
    assert received(events[:retry]) == "Fine. "
    assert received(events[retry:]) == "A clean answer." and kinds[-1] == "finish"


@pytest.mark.django_db
def test_under_sentences_a_stream_guardrail_stops_the_sentence_it_is_in_too():
    class BlockStreamed:
        id = "block-streamed"

        def process_output_stream(self, ctx: Any, part: StreamEvent) -> StreamEvent:
            if part.type == "text-delta" and "Zanzibar" in part.text:
                ctx.abort("A blocked term on the stream")
            return part

    events = run(
        agent_with(ScriptedModel([BLOCKED]), output_processors=[BlockStreamed()]), stream_policy="sentences"
    )
    assert received(events) == "Our office is open today. "
    assert events[-1].tripwire.phase == "stream"


@pytest.mark.django_db
def test_max_length_on_output_releases_no_byte_of_the_sentence_that_crosses_the_limit():
    agent = agent_with(
        ScriptedModel(["Short one. This second sentence goes past the limit."]),
        output_processors=[MaxLength(limit=30, on="output")],
    )
    events = run(agent)
    assert received(events) == "Short one. "
    # its stream hook trips at the delta that crosses the limit, which "sentences" still held
    assert events[-1].tripwire.processor_id == "max-length" and events[-1].tripwire.phase == "stream"


# --- "hold" -------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_hold_releases_nothing_of_a_blocked_reply():
    model = ScriptedModel([BLOCKED])
    events = run(agent_with(model, output_processors=[BlockTerm()], stream_policy="hold"))
    assert [e.type for e in events] == ["tripwire"]


@pytest.mark.django_db
def test_hold_drops_a_retried_draft_and_releases_the_accepted_one():
    model = ScriptedModel(["Fine. But Zanzibar. More", "A clean answer."])
    agent = agent_with(
        model, output_processors=[BlockTerm(retry=True)], max_processor_retries=1, stream_policy="hold"
    )
    events = run(agent)
    assert [e.type for e in events][0] == "retry"
    assert received(events) == "A clean answer." and events[-1].type == "finish"


@pytest.mark.django_db
def test_hold_releases_everything_in_order_once_the_result_guardrails_passed():
    def lookup(city: str) -> str:
        """Finds a city."""
        return "found"

    log: list[tuple[str, str]] = []
    model = RecordingModel(
        log,
        ModelResponse(text="Looking.", tool_calls=[ToolCall("c1", "lookup", {"city": "Oslo"})]),
        CLEAN,
    )
    agent = agent_with(model, tools=[lookup], output_processors=[JudgeWhole()])
    events = read_logged(agent, log)
    assert first(log, "client") > last(log, "model")
    kinds = [e.type for e in events]
    assert kinds[0] == "text-delta" and kinds.index("tool-call") < kinds.index("tool-result")
    assert kinds[-1] == "finish" and received(events) == "Looking." + CLEAN


# --- "live" and the opt-in ------------------------------------------------------------------------


@pytest.mark.django_db
def test_live_with_the_opt_in_streams_as_before_and_leaks_what_the_result_blocks():
    log: list[tuple[str, str]] = []
    model = RecordingModel(log, BLOCKED)
    agent = agent_with(
        model, output_processors=[BlockTerm()], stream_policy="live", allow_unscreened_stream=True
    )
    events = read_logged(agent, log)
    assert log[0] == ("model", "Our") and log[1] == ("client", "Our")  # each chunk as it is made
    assert "Zanzibar" in received(events) and events[-1].type == "tripwire"


def test_an_agent_refuses_a_policy_weaker_than_its_guardrails_need():
    with pytest.raises(ConfigurationError, match=r"block-term.*allow_unscreened_stream=True"):
        agent_with(ScriptedModel(), output_processors=[BlockTerm()], stream_policy="live")
    with pytest.raises(ConfigurationError, match="judge-whole"):
        agent_with(ScriptedModel(), output_processors=[JudgeWhole()], stream_policy="sentences")
    agent_with(
        ScriptedModel(),
        output_processors=[JudgeWhole()],
        stream_policy="sentences",
        allow_unscreened_stream=True,
    )


def test_the_default_is_the_strictest_policy_the_output_processors_need():
    def policy(*processors: Any) -> str:
        return agent_with(ScriptedModel(), output_processors=list(processors)).plan().stream_policy

    assert policy() == "live"
    assert policy(BlockTerm()) == "sentences"
    assert policy(BlockTerm(), JudgeWhole()) == "hold"
    # a processor that declares nothing keeps today's live stream
    assert policy(type("Undeclared", (), {"id": "u", "process_output_result": lambda s, c: None})()) == "live"


def test_what_the_ready_made_guardrails_need():
    assert MaxLength(limit=5).needs_stream_policy == "live"
    assert MaxLength(limit=5, on="output").needs_stream_policy == "sentences"
    assert ModerationProcessor().needs_stream_policy == "sentences"
    assert ModerationProcessor(channels=("input", "stream")).needs_stream_policy == "hold"
    assert ModerationProcessor(strategy="warn").needs_stream_policy == "live"
    assert PIIDetector().needs_stream_policy == "live"
    assert PIIDetector(strategy="block").needs_stream_policy == "live"  # matches never leave the stream hook
    assert PIIDetector(strategy="block", model=ScriptedModel()).needs_stream_policy == "hold"
    assert getattr(SystemPromptScrubber(), "needs_stream_policy", "live") == "live"


def test_bad_values_are_refused():
    with pytest.raises(ConfigurationError, match="stream_policy must be one of"):
        agent_with(ScriptedModel(), stream_policy="fast")
    with pytest.raises(ConfigurationError, match="allow_unscreened_stream"):
        agent_with(ScriptedModel(), allow_unscreened_stream="yes")
    odd = type("Odd", (), {"id": "odd", "needs_stream_policy": "later"})()
    with pytest.raises(ConfigurationError, match="'odd' has needs_stream_policy='later'"):
        agent_with(ScriptedModel(), output_processors=[odd])


# --- per call -------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_call_may_choose_a_stricter_policy():
    events = run(agent_with(ScriptedModel([BLOCKED]), output_processors=[BlockTerm()]), stream_policy="hold")
    assert [e.type for e in events] == ["tripwire"]


@pytest.mark.django_db
def test_a_call_may_not_choose_a_weaker_one_unless_the_agent_opted_in():
    agent = agent_with(ScriptedModel([CLEAN]), output_processors=[BlockTerm()])
    with pytest.raises(ValidationError, match="allow_unscreened_stream"):
        run(agent, stream_policy="live")
    with pytest.raises(ValidationError, match="stream_policy must be one of"):
        run(agent, stream_policy="later")
    opted = agent_with(
        ScriptedModel([BLOCKED]), output_processors=[BlockTerm()], allow_unscreened_stream=True
    )
    assert "Zanzibar" in received(run(opted, stream_policy="live"))


@pytest.mark.django_db(transaction=True)
def test_astream_takes_the_policy_per_call_too():
    agent = agent_with(ScriptedModel([BLOCKED]), output_processors=[BlockTerm()], stream_policy="hold")

    async def collect(**options: Any) -> list[StreamEvent]:
        return [e async for e in agent.astream("hi", thread_id=T, resource_id=R, **options)]

    assert [e.type for e in async_to_sync(collect)()] == ["tripwire"]
    agent.model.add(BLOCKED)
    events = async_to_sync(collect)(stream_policy="sentences")
    assert received(events) == "Our office is open today. " and events[-1].type == "tripwire"
