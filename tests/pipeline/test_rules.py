"""DESIGN §2 pipeline rules 1-10, each with its failure case."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import async_to_sync

from memproc import Agent, Memory
from memproc.events import Tripwire
from memproc.exceptions import ModelUnavailableError, ValidationError
from memproc.llm.types import ModelResponse, ToolCall
from memproc.messages import Message
from memproc.models import Message as StoredMessage
from memproc.models import Thread, TripwireLog
from memproc.processors import MessageHistory
from memproc.signals import tripwire_triggered
from memproc.testing import ScriptedModel

pytestmark = pytest.mark.django_db

T, R = "t1", "user-1"


class Recorder:
    """Appends its id to a shared log on every hook."""

    def __init__(self, pid: str, log: list[str]) -> None:
        self.id = pid
        self.log = log

    def process_input(self, ctx):
        self.log.append(f"in:{self.id}")

    def process_output_result(self, ctx):
        self.log.append(f"out:{self.id}")


class Blocker:
    def __init__(
        self,
        pid: str = "blocker",
        *,
        on: str = "input",
        reason: str | None = "No.",
        retry: bool = False,
        metadata: dict | None = None,
    ) -> None:
        self.id = pid
        self.on, self.reason, self.retry, self.metadata = on, reason, retry, metadata
        self.calls = 0

    def process_input(self, ctx):
        if self.on == "input":
            ctx.abort(self.reason, retry=self.retry, metadata=self.metadata)

    def process_output_result(self, ctx):
        self.calls += 1
        if self.on == "output":
            ctx.abort(self.reason, retry=self.retry, metadata=self.metadata)

    def process_output_stream(self, ctx, part):
        if self.on == "stream" and "bad" in part.text:
            ctx.abort(self.reason, retry=self.retry)
        return part


class Uppercase:
    id = "uppercase"

    def process_output_result(self, ctx):
        return [
            m.replace(parts=(type(m.parts[0])(m.text.upper()),)) if m.role == "assistant" else m
            for m in ctx.messages
        ]


def stored() -> list[tuple[str, str]]:
    return list(StoredMessage.objects.order_by("thread_id", "sequence").values_list("role", "text"))


# --- rules 1-3: order and dedup -------------------------------------------------------------------


def test_memory_processors_run_first_on_input_and_last_on_output(make_agent, model):
    log: list[str] = []
    agent = make_agent(
        input_processors=[Recorder("a", log), Recorder("b", log)], output_processors=[Recorder("c", log)]
    )
    chain_in, chain_out = agent.processor_chains()
    assert [p.id for p in chain_in] == ["attachment-uploader", "message-history", "a", "b"]
    assert [p.id for p in chain_out] == ["c", "message-history"]
    model.add("ok")
    agent.generate("hi", thread_id=T, resource_id=R)
    assert log == ["in:a", "in:b", "out:c"]


def test_memory_order_with_all_memory_processors(make_agent):
    agent = make_agent(memory=Memory(semantic_recall=True, working_memory=True))
    chain_in, chain_out = agent.processor_chains()
    assert [p.id for p in chain_in] == [
        "attachment-uploader",
        "working-memory",
        "message-history",
        "semantic-recall",
    ]
    assert [p.id for p in chain_out] == ["semantic-recall", "message-history"]


def test_user_memory_processor_replaces_automatic_one_per_direction(make_agent, model):
    from memproc.processors import TokenLimiter

    custom = MessageHistory(last_messages=20)
    limiter = TokenLimiter(4000)
    agent = make_agent(input_processors=[custom, limiter])
    chain_in, chain_out = agent.processor_chains()
    assert [p.id for p in chain_in] == ["attachment-uploader", "message-history", "token-limiter"]
    assert chain_in[1:] == [custom, limiter]
    # Output still gets the automatic MessageHistory, which saves.
    assert [p.id for p in chain_out] == ["message-history"] and chain_out[0] is not custom
    model.add("ok")
    agent.generate("hi", thread_id=T, resource_id=R)
    assert stored() == [("user", "hi"), ("assistant", "ok")]


def test_custom_history_window_is_used(make_agent, model):
    agent = make_agent(memory=Memory(last_messages=2), input_processors=[MessageHistory(last_messages=4)])
    for i in range(3):
        model.add(f"a{i}")
        agent.generate(f"u{i}", thread_id=T, resource_id=R)
    texts = [m.text for m in model.requests[-1].messages if m.role != "system"]
    assert texts == ["u0", "a0", "u1", "a1", "u2"]  # 4 loaded by the custom processor + the new input


# --- rule 4: input abort --------------------------------------------------------------------------


def test_input_abort_never_calls_model_saves_nothing_and_logs(make_agent, model):
    received = []
    tripwire_triggered.connect(lambda **kw: received.append(kw), weak=False, dispatch_uid="t-in")
    try:
        agent = make_agent(input_processors=[Blocker(reason="Too rude", metadata={"score": 0.9})])
        result = agent.generate("you are awful", thread_id=T, resource_id=R)
    finally:
        tripwire_triggered.disconnect(dispatch_uid="t-in")
    assert model.calls == 0
    assert result.text == "" and result.messages == []
    assert result.tripwire == Tripwire("Too rude", "blocker", "input", False, {"score": 0.9})
    assert stored() == [] and not Thread.objects.exists()
    log = TripwireLog.objects.get()
    assert (log.agent_id, log.processor_id, log.phase, log.reason) == (
        "test-agent",
        "blocker",
        "input",
        "Too rude",
    )
    assert (log.thread_id, log.resource_id, log.metadata) == (T, R, {"score": 0.9})
    assert log.content[0]["parts"][0]["text"] == "you are awful"
    assert received and received[0]["log"] == log


def test_blocked_content_not_stored_when_setting_off(make_agent, settings):
    settings.MEMPROC = {**settings.MEMPROC, "STORE_BLOCKED_CONTENT": False}
    make_agent(input_processors=[Blocker()]).generate("secret", thread_id=T, resource_id=R)
    assert TripwireLog.objects.get().content is None


def test_input_abort_is_final_even_with_retry(make_agent, model):
    agent = make_agent(input_processors=[Blocker(retry=True)], max_processor_retries=3)
    result = agent.generate("x", thread_id=T, resource_id=R)
    assert model.calls == 0 and result.tripwire.retry is True and result.tripwire.phase == "input"


# --- rule 5: output abort -------------------------------------------------------------------------


def test_output_abort_saves_nothing_and_keeps_earlier_turns(make_agent, model):
    agent = make_agent()
    model.add("first answer")
    agent.generate("first", thread_id=T, resource_id=R)
    blocked = make_agent(output_processors=[Blocker(on="output", reason="Leaks")])
    model.add("second answer")
    result = blocked.generate("second", thread_id=T, resource_id=R)
    assert result.tripwire.phase == "output" and result.text == ""
    assert stored() == [("user", "first"), ("assistant", "first answer")]
    assert TripwireLog.objects.get().content[0]["parts"][0]["text"] == "second"


def test_memory_processors_skipped_after_output_abort(make_agent, model):
    agent = make_agent(output_processors=[Blocker(on="output")])
    model.add("draft")
    agent.generate("hi", thread_id=T, resource_id=R)
    assert not Thread.objects.exists()


# --- rule 6: retry with feedback ------------------------------------------------------------------


def test_retry_sends_feedback_without_rejected_draft(make_agent, model):
    class RejectFirst:
        id = "reject-first"

        def process_output_result(self, ctx):
            if ctx.state.setdefault("n", 0) == 0:
                ctx.state["n"] = 1
                ctx.abort("Mentions a competitor", retry=True)

    model.add("Try CompetitorCo", "Here is our product")
    agent = make_agent(output_processors=[RejectFirst()], max_processor_retries=1)
    result = agent.generate("what should I buy?", thread_id=T, resource_id=R)
    assert result.tripwire is None and result.text == "Here is our product"
    second = model.requests[1].messages
    texts = [m.text for m in second]
    assert not any("CompetitorCo" in t for t in texts)
    feedback = [m for m in second if m.role == "system" and m.text.startswith("[Processor Feedback]")]
    assert len(feedback) == 1 and "Mentions a competitor" in feedback[0].text
    assert stored() == [("user", "what should I buy?"), ("assistant", "Here is our product")]


def test_retry_exhausted_leaves_tripwire(make_agent, model):
    blocker = Blocker(on="output", reason="Still bad", retry=True)
    model.add("bad 1", "bad 2", "bad 3")
    agent = make_agent(output_processors=[blocker], max_processor_retries=2)
    result = agent.generate("x", thread_id=T, resource_id=R)
    assert model.calls == 3 and blocker.calls == 3
    assert result.tripwire.retry is True and result.tripwire.reason == "Still bad"
    assert stored() == [] and TripwireLog.objects.count() == 1


def test_retry_without_retries_left_is_an_ordinary_abort(make_agent, model):
    model.add("bad")
    result = make_agent(output_processors=[Blocker(on="output", retry=True)]).generate(
        "x", thread_id=T, resource_id=R
    )
    assert model.calls == 1 and result.tripwire.retry is True


# --- rule 7: tripwire shape, chain stops, errors --------------------------------------------------


def test_default_reason_names_the_processor(make_agent, model):
    result = make_agent(input_processors=[Blocker("my-guard", reason=None)]).generate(
        "x", thread_id=T, resource_id=R
    )
    assert result.tripwire.reason == "Tripwire triggered by my-guard"


def test_later_processors_do_not_run_after_abort(make_agent):
    log: list[str] = []
    agent = make_agent(input_processors=[Recorder("a", log), Blocker(), Recorder("c", log)])
    agent.generate("x", thread_id=T, resource_id=R)
    assert log == ["in:a"]


def test_processor_exception_fails_the_turn_and_saves_nothing(make_agent, model):
    class Broken:
        id = "broken"

        def process_output_result(self, ctx):
            raise RuntimeError("bug in processor")

    model.add("answer")
    with pytest.raises(RuntimeError, match="bug in processor"):
        make_agent(output_processors=[Broken()]).generate("x", thread_id=T, resource_id=R)
    assert stored() == []


def test_stream_processor_error_passes_part_unchanged(make_agent, model, caplog):
    class Broken:
        id = "broken-stream"

        def process_output_stream(self, ctx, part):
            raise RuntimeError("stream bug")

    model.add("hello world")
    events = list(make_agent(output_processors=[Broken()]).stream("x", thread_id=T, resource_id=R))
    assert "".join(e.text for e in events if e.type == "text-delta") == "hello world"
    assert events[-1].type == "finish" and events[-1].result.text == "hello world"
    assert "stream bug" in caplog.text or "broken-stream" in caplog.text


def test_processor_returning_garbage_is_a_clear_error(make_agent, model):
    class Bad:
        id = "bad"

        def process_input(self, ctx):
            return "not a list"

    with pytest.raises(TypeError, match="'bad' returned str"):
        make_agent(input_processors=[Bad()]).generate("x", thread_id=T, resource_id=R)


# --- stream abort ---------------------------------------------------------------------------------


def test_stream_abort_emits_one_tripwire_event_and_ends(make_agent, model):
    model.add("fine then bad words here")
    events = list(
        make_agent(output_processors=[Blocker(on="stream", reason="Bad word")]).stream(
            "x", thread_id=T, resource_id=R
        )
    )
    assert [e.type for e in events] == ["text-delta", "text-delta", "tripwire"]
    assert events[-1].tripwire.phase == "stream" and events[-1].tripwire.reason == "Bad word"
    assert stored() == [] and TripwireLog.objects.get().phase == "stream"


def test_stream_processor_can_change_and_drop_parts(make_agent, model):
    class Redact:
        id = "redact"

        def process_output_stream(self, ctx, part):
            if part.type == "text-delta" and "secret" in part.text:
                return None
            return part

    model.add("the secret plan")
    events = list(make_agent(output_processors=[Redact()]).stream("x", thread_id=T, resource_id=R))
    assert "".join(e.text for e in events if e.type == "text-delta") == "the plan"
    assert stored()[-1] == ("assistant", "the plan")


def test_output_processors_transform_what_is_saved(make_agent, model):
    model.add("quiet answer")
    result = make_agent(output_processors=[Uppercase()]).generate("x", thread_id=T, resource_id=R)
    assert result.text == "QUIET ANSWER" and stored()[-1] == ("assistant", "QUIET ANSWER")


# --- rule 9: atomic saves -------------------------------------------------------------------------


def test_model_error_saves_nothing_and_is_raised(make_agent, model):
    model.add(ModelUnavailableError("provider down"))
    with pytest.raises(ModelUnavailableError):
        make_agent().generate("x", thread_id=T, resource_id=R)
    assert stored() == [] and not Thread.objects.exists()


def test_failure_during_save_rolls_back_every_row(make_agent, model, monkeypatch):
    def explode(*args, **kwargs):
        raise RuntimeError("disk full")

    agent = make_agent(memory=Memory(working_memory={"scope": "thread"}))
    model.add(
        ModelResponse(tool_calls=[ToolCall("c1", "updateWorkingMemory", {"memory": "# Name: Ada"})]), "ok"
    )
    # The working-memory revision is the last write of the turn: the messages are in by then.
    monkeypatch.setattr("memproc.models.WorkingMemoryRevision.save", explode)
    with pytest.raises(RuntimeError, match="disk full"):
        agent.generate("I am Ada", thread_id=T, resource_id=R)
    assert stored() == [] and not Thread.objects.exists()


# --- rule 10: immutability ------------------------------------------------------------------------


def test_mutating_messages_raises(make_agent, model):
    class Mutator:
        id = "mutator"

        def process_input(self, ctx):
            ctx.messages[-1].parts[0].text = "changed"

    with pytest.raises(AttributeError):
        make_agent(input_processors=[Mutator()]).generate("x", thread_id=T, resource_id=R)
    assert model.calls == 0


def test_appending_to_the_message_list_raises(make_agent):
    class Appender:
        id = "appender"

        def process_input(self, ctx):
            ctx.messages.append(Message.create("user", "sneaky"))

    with pytest.raises(AttributeError):
        make_agent(input_processors=[Appender()]).generate("x", thread_id=T, resource_id=R)


def test_tool_call_args_are_frozen():
    from memproc.messages import ToolCallPart

    part = ToolCallPart("c", "t", {"nested": {"a": [1, 2]}})
    with pytest.raises(TypeError):
        part.args["nested"]["a"] = 3


# --- rule 12: system messages never saved; read-only ----------------------------------------------


def test_system_messages_are_never_saved(make_agent, model):
    class AddSystem:
        id = "add-system"

        def process_input(self, ctx):
            return [*ctx.messages, Message.create("system", "Extra rule")]

    model.add("ok")
    make_agent(input_processors=[AddSystem()]).generate("hi", thread_id=T, resource_id=R)
    assert [m.text for m in model.requests[0].messages if m.role == "system"] == [
        "You are a test agent.",
        "Extra rule",
    ]
    assert stored() == [("user", "hi"), ("assistant", "ok")]


def test_read_only_loads_but_never_saves(make_agent, model):
    model.add("one", "two")
    make_agent().generate("first", thread_id=T, resource_id=R)
    make_agent(memory=Memory(read_only=True)).generate("second", thread_id=T, resource_id=R)
    assert [m.text for m in model.requests[1].messages][1:] == ["first", "one", "second"]
    assert len(stored()) == 2


def test_last_messages_false_neither_loads_nor_saves(make_agent, model):
    model.add("one", "two")
    agent = make_agent(memory=Memory(last_messages=False))
    agent.generate("first", thread_id=T, resource_id=R)
    agent.generate("second", thread_id=T, resource_id=R)
    assert [m.text for m in model.requests[1].messages] == ["You are a test agent.", "second"]
    assert stored() == []


# --- tools ----------------------------------------------------------------------------------------


def test_tool_loop_runs_tools_and_saves_calls_and_results(make_agent, model):
    from memproc import tool

    @tool
    def weather(city: str, unit: str = "C") -> dict:
        """Current weather for a city."""
        return {"city": city, "temp": 21, "unit": unit}

    model.add(ModelResponse(tool_calls=[ToolCall("c1", "weather", {"city": "Oslo"})]), "It is 21 C in Oslo.")
    result = make_agent(tools=[weather]).generate("weather in Oslo?", thread_id=T, resource_id=R)
    assert result.text == "It is 21 C in Oslo."
    assert model.requests[0].tools[0].parameters["required"] == ["city"]
    tool_msg = model.requests[1].messages[-1]
    assert tool_msg.role == "tool" and tool_msg.tool_results[0].result["temp"] == 21
    assert [r for r, _ in stored()] == ["user", "assistant", "tool", "assistant"]


def test_tool_errors_and_unknown_tools_reach_the_model(make_agent, model):
    from memproc import tool

    @tool
    def fail(x: int) -> int:
        raise ValueError("boom")

    model.add(
        ModelResponse(
            tool_calls=[
                ToolCall("c1", "fail", {"x": 1}),
                ToolCall("c2", "nope", {}),
                ToolCall("c3", "fail", {"x": "not an int"}),
            ]
        ),
        "sorry",
    )
    make_agent(tools=[fail]).generate("go", thread_id=T, resource_id=R)
    results = model.requests[1].messages[-1].tool_results
    assert all(r.is_error for r in results)
    assert (
        "boom" in results[0].result and "Unknown tool" in results[1].result and "Invalid" in results[2].result
    )


def test_tool_loop_stops_at_step_limit(make_agent, model):
    from memproc import tool

    @tool
    def again() -> str:
        return "again"

    model.add(*[ModelResponse(tool_calls=[ToolCall(f"c{i}", "again", {})]) for i in range(3)])
    result = make_agent(tools=[again], max_steps=3).generate("loop", thread_id=T, resource_id=R)
    assert model.calls == 3 and result.steps == 3


def test_streaming_tool_calls_emit_events(make_agent, model):
    from memproc import tool

    @tool
    def add(a: int, b: int) -> int:
        return a + b

    model.add(ModelResponse(tool_calls=[ToolCall("c1", "add", {"a": 2, "b": 3})]), "five")
    events = list(make_agent(tools=[add]).stream("2+3?", thread_id=T, resource_id=R))
    types = [e.type for e in events]
    assert types == ["tool-call", "tool-result", "text-delta", "finish"]
    assert events[1].tool_result.result == 5


# --- async ----------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)  # async turns write from worker threads
def test_agenerate_and_async_processors(make_agent, model):
    class AsyncTag:
        id = "async-tag"

        async def process_input(self, ctx):
            await asyncio.sleep(0)
            return [*ctx.messages, Message.create("system", "async was here")]

    model.add("ok", "streamed")
    agent = make_agent(input_processors=[AsyncTag()])
    result = async_to_sync(agent.agenerate)("hi", thread_id=T, resource_id=R)
    assert result.text == "ok"
    assert "async was here" in [m.text for m in model.requests[0].messages]

    async def collect():
        return [e async for e in agent.astream("again", thread_id=T, resource_id=R)]

    events = async_to_sync(collect)()
    assert events[-1].type == "finish" and events[-1].result.text == "streamed"


# --- ownership ------------------------------------------------------------------------------------


def test_a_thread_id_names_a_thread_within_its_resource(make_agent, model):
    """Another resource's turn on the same thread id is a thread of its own: it neither sees nor
    changes the first (DESIGN §5)."""
    model.add("ok", "fine")
    make_agent().generate("mine", thread_id=T, resource_id=R)
    result = make_agent().generate("theirs", thread_id=T, resource_id="intruder")
    assert (result.thread_id, result.resource_id) == (T, "intruder")
    assert [m.text for m in model.requests[1].messages if m.role != "system"] == ["theirs"]
    texts = StoredMessage.objects.order_by("sequence").values_list("text", flat=True)
    assert list(texts.filter(resource_id=R)) == ["mine", "ok"]
    assert list(texts.filter(resource_id="intruder")) == ["theirs", "fine"]


def test_a_thread_id_without_its_resource_must_be_unambiguous(make_agent, model):
    model.add("ok", "fine", "again")
    make_agent().generate("mine", thread_id=T, resource_id=R)
    make_agent().generate("more", thread_id=T)  # one thread of that id: its resource is implied
    make_agent().generate("theirs", thread_id=T, resource_id="intruder")
    with pytest.raises(ValidationError, match="pass resource_id"):
        make_agent().generate("which?", thread_id=T)
    assert model.calls == 3  # the ambiguous turn reached no model and saved nothing
    texts = StoredMessage.objects.order_by("sequence").values_list("text", flat=True)
    assert list(texts.filter(resource_id=R)) == ["mine", "ok", "more", "fine"]
    assert list(texts.filter(resource_id="intruder")) == ["theirs", "again"]


def test_agent_without_memory_stores_nothing(model):
    model.add("hi")
    result = Agent(id="plain", model=model).generate("hello")
    assert result.text == "hi" and result.thread_id is None and stored() == []


def test_scripted_model_running_out_fails_loudly():
    with pytest.raises(AssertionError, match="ran out"):
        ScriptedModel([]).generate(None)
