"""DESIGN §8 Observability: OpenTelemetry spans of a turn, the TurnRecord and its manifest, signals."""

from __future__ import annotations

import pytest
from opentelemetry import trace
from opentelemetry.trace import StatusCode

from memproc import Memory, signals, tool
from memproc.llm.types import ModelResponse, ToolCall
from memproc.messages import Message
from memproc.models import TurnRecord
from memproc.testing import HashEmbedder

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("otel_exporter")]

T, R = "t-obs", "user-obs"


@tool
def lookup(city: str) -> str:
    """Looks a city up."""
    return f"{city}: grey"


class RejectDraft:
    id = "reject-draft"

    def process_output_step(self, ctx):
        if "draft" in ctx.messages[-1].text:
            ctx.abort("No drafts", retry=True)


def by_name(finished):
    return {s.name: s for s in finished}


def test_a_turn_is_a_span_tree_with_recall_tool_retry_and_save(make_agent, model, spans):
    embedder = HashEmbedder(dimensions=32)
    memory = Memory(last_messages=4, semantic_recall={"top_k": 2, "scope": "thread"}, embedder=embedder)
    agent = make_agent(
        memory=memory, tools=[lookup], output_processors=[RejectDraft()], max_processor_retries=1
    )
    model.add("Oslo is a city")
    agent.generate("Tell me about Oslo", thread_id=T, resource_id=R)
    spans.clear()
    model.add(
        ModelResponse(tool_calls=[ToolCall("c1", "lookup", {"city": "Oslo"})]), "a draft", "Oslo is grey"
    )
    agent.generate("How is Oslo today?", thread_id=T, resource_id=R)
    finished = spans.get_finished_spans()
    names = [s.name for s in finished]
    turn = by_name(finished)["invoke_agent test-agent"]
    assert turn.parent is None and turn.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert turn.attributes["gen_ai.conversation.id"] == T
    assert turn.attributes["memproc.turn.status"] == "completed"
    children = [s for s in finished if s.parent is not None and s.parent.span_id == turn.context.span_id]
    child_names = {s.name for s in children}
    assert {"chat scripted", "execute_tool lookup", "memproc.save"} <= child_names
    assert "memproc.processor semantic-recall process_input" in child_names
    assert names.count("chat scripted") == 3  # tool step, rejected draft, the retry
    chat = [s for s in finished if s.name == "chat scripted"][-1]  # the answer (the tool step has no usage)
    assert chat.attributes["gen_ai.operation.name"] == "chat"
    assert chat.attributes["gen_ai.provider.name"] == "test"
    assert chat.attributes["gen_ai.usage.output_tokens"] == 3
    assert chat.attributes["gen_ai.response.finish_reasons"] == ("stop",)
    rejected = [s for s in finished if s.name == "memproc.processor reject-draft process_output_step"]
    assert any(s.attributes.get("memproc.tripwire.reason") == "No drafts" for s in rejected)
    recall_parent = by_name(finished)["memproc.processor semantic-recall process_input"]
    recall = by_name(finished)["memproc.recall"]
    assert recall.parent.span_id == recall_parent.context.span_id
    assert recall.attributes["memproc.recall.scope"] == "thread"


def test_no_message_content_on_spans_by_default(make_agent, model, spans):
    model.add("a secret answer")
    make_agent().generate("a secret question", thread_id=T, resource_id=R)
    for span in spans.get_finished_spans():
        assert not any("secret" in str(v) for v in span.attributes.values()), span.name


def test_content_on_spans_only_with_trace_content(make_agent, model, spans, settings):
    settings.MEMPROC = {**settings.MEMPROC, "TRACE_CONTENT": True}
    model.add("a visible answer")
    make_agent().generate("hi", thread_id=T, resource_id=R)
    chat = by_name(spans.get_finished_spans())["chat scripted"]
    assert chat.attributes["gen_ai.output.text"] == "a visible answer"


def test_a_blocked_turn_span_and_record(make_agent, model, spans):
    class Block:
        id = "block"

        def process_input(self, ctx):
            ctx.abort("Nope")

    result = make_agent(input_processors=[Block()]).generate("x", thread_id=T, resource_id=R)
    assert result.tripwire is not None
    turn = by_name(spans.get_finished_spans())["invoke_agent test-agent"]
    assert turn.attributes["memproc.turn.status"] == "blocked"
    block = by_name(spans.get_finished_spans())["memproc.processor block process_input"]
    assert block.attributes["memproc.tripwire.phase"] == "input"
    record = TurnRecord.objects.get()
    assert record.status == "blocked" and record.tripwire.reason == "Nope" and record.message_ids == []


def test_a_failed_turn_span_is_an_error_and_leaves_a_record(make_agent, model, spans):
    from memproc.exceptions import ModelUnavailableError

    model.add(ModelUnavailableError("down"))
    with pytest.raises(ModelUnavailableError):
        make_agent().generate("x", thread_id=T, resource_id=R)
    turn = by_name(spans.get_finished_spans())["invoke_agent test-agent"]
    assert turn.status.status_code == StatusCode.ERROR
    assert turn.attributes["error.type"] == "ModelUnavailableError"
    record = TurnRecord.objects.get()
    assert (record.status, record.error) == ("failed", "ModelUnavailableError")


def test_the_turn_joins_the_callers_span(make_agent, model, spans):
    tracer = trace.get_tracer("test")
    model.add("ok")
    with tracer.start_as_current_span("request") as request_span:
        make_agent().generate("hi", thread_id=T, resource_id=R)
    turn = by_name(spans.get_finished_spans())["invoke_agent test-agent"]
    assert turn.parent.span_id == request_span.get_span_context().span_id


def test_record_manifest_names_history_recall_scores_and_working_memory(make_agent, model):
    embedder = HashEmbedder(dimensions=32)
    memory = Memory(
        last_messages=2,
        semantic_recall={"top_k": 2, "message_range": 0, "scope": "thread"},
        working_memory=True,
        embedder=embedder,
    )
    agent = make_agent(memory=memory)
    for text in ("my cat is called Tom", "the weather is nice", "I like tea"):
        model.add("noted")
        agent.generate(text, thread_id=T, resource_id=R)
    memory.update_working_memory("# User\n- Name: Ada", resource_id=R)
    model.add("Tom")
    result = agent.generate("what is my cat called?", thread_id=T, resource_id=R)
    record = TurnRecord.objects.filter(status="completed").order_by("-started_at").first()
    manifest = record.manifest
    assert manifest["history"] == [m.id for m in result.prompt if m.role != "system"][-3:-1]
    assert manifest["recalled"] and all(r["thread_id"] == T for r in manifest["recalled"])
    assert any(isinstance(r["score"], float) for r in manifest["recalled"])
    assert manifest["working_memory"] == {"scope": "resource", "key": R, "version": 1}
    hooks = {(p["processor"], p["hook"]) for p in manifest["processors"]}
    assert ("message-history", "process_input") in hooks and ("semantic-recall", "process_input") in hooks
    assert record.message_ids == [m.id for m in result.messages]
    assert record.steps == 1 and record.duration_ms > 0 and record.model == "test/scripted"
    assert "Tom" not in str(manifest)  # ids and numbers, never text


def test_records_are_off_with_the_setting(make_agent, model, settings):
    settings.MEMPROC = {**settings.MEMPROC, "RECORD_TURNS": False}
    model.add("ok")
    make_agent().generate("x", thread_id=T, resource_id=R)
    assert not TurnRecord.objects.exists()


# --- signals --------------------------------------------------------------------------------------


@pytest.fixture
def received():
    log: list[tuple[str, dict]] = []
    names = ["turn_completed", "messages_saved", "working_memory_updated", "thread_created", "thread_deleted"]
    handlers = {}
    for name in names:

        def handler(sender, _name=name, **kwargs):
            log.append((_name, kwargs))

        handlers[name] = handler
        getattr(signals, name).connect(handler, dispatch_uid=f"test-{name}")
    yield log
    for name in names:
        getattr(signals, name).disconnect(dispatch_uid=f"test-{name}")


def test_turn_signals_carry_agent_thread_and_resource(make_agent, model, received):
    wm_tool = ModelResponse(
        tool_calls=[ToolCall("w1", "updateWorkingMemory", {"memory": "# User\n- Name: Ada"})]
    )
    model.add(wm_tool, "Hello Ada")
    make_agent(memory=Memory(working_memory=True)).generate("I am Ada", thread_id=T, resource_id=R)
    kinds = [name for name, _ in received]
    assert kinds.count("thread_created") == 1 and kinds.count("messages_saved") == 1
    assert kinds.count("working_memory_updated") == 1 and kinds[-1] == "turn_completed"
    for _, kwargs in received:
        assert (kwargs["agent_id"], kwargs["thread_id"], kwargs["resource_id"]) == ("test-agent", T, R)
    by = dict(received)
    assert [m.text for m in by["messages_saved"]["messages"]] == ["I am Ada", "Hello Ada"]
    assert by["working_memory_updated"]["version"] == 1 and by["working_memory_updated"]["source"] == "model"
    assert by["turn_completed"]["result"].text == "Hello Ada"
    assert TurnRecord.objects.filter(pk=by["turn_completed"]["record_id"]).exists()


def test_no_signal_but_the_tripwire_for_a_blocked_turn(make_agent, model, received):
    class Block:
        id = "block"

        def process_input(self, ctx):
            ctx.abort()

    make_agent(input_processors=[Block()]).generate("x", thread_id=T, resource_id=R)
    assert received == []


def test_thread_deleted_signal(make_agent, model, received, django_capture_on_commit_callbacks):
    memory = Memory()
    with django_capture_on_commit_callbacks(execute=True):
        memory.create_thread(resource_id=R, thread_id="t-del")
    with django_capture_on_commit_callbacks(execute=True):
        memory.delete_thread("t-del")
    assert [(n, k["thread_id"], k["resource_id"]) for n, k in received] == [
        ("thread_created", "t-del", R),
        ("thread_deleted", "t-del", R),
    ]


def test_signals_wait_for_the_commit(make_agent, model, received, django_capture_on_commit_callbacks):
    from memproc.services.messages import messages_save

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        messages_save(thread_id="t-wait", resource_id=R, messages=[Message.create("user", "hi")])
    assert received == [] and callbacks


def test_without_opentelemetry_turns_run_and_nothing_is_imported(make_agent, model, monkeypatch):
    import sys

    from memproc import telemetry

    monkeypatch.setitem(sys.modules, "opentelemetry", None)  # as if the otel extra were not installed
    telemetry._api.cache_clear()
    try:
        assert not telemetry.enabled() and telemetry.start_span("x") is telemetry.NO_SPAN
        model.add("fine")
        assert make_agent().generate("hi", thread_id=T, resource_id=R).text == "fine"
    finally:
        telemetry._api.cache_clear()


# --- log lines carry the turn ---------------------------------------------------------------------


def test_log_lines_during_a_turn_carry_agent_thread_resource_and_turn(make_agent, model, caplog):
    import logging

    from memproc.logs import TurnContextFilter

    library = logging.getLogger("some.library")

    @tool
    def noisy(x: int) -> int:
        """Logs, as any library a tool calls might."""
        library.warning("called with %s", x)
        return x

    model.add(ModelResponse(tool_calls=[ToolCall("n1", "noisy", {"x": 1})]), "done")
    handler_filter = TurnContextFilter()
    caplog.handler.addFilter(handler_filter)
    try:
        with caplog.at_level(logging.WARNING, logger="some.library"):
            make_agent(tools=[noisy]).generate("go", thread_id=T, resource_id=R)
        library.warning("after the turn")
    finally:
        caplog.handler.removeFilter(handler_filter)
    during, after = [r for r in caplog.records if r.name == "some.library"]
    record = TurnRecord.objects.get()
    assert (during.agent_id, during.thread_id, during.resource_id) == ("test-agent", T, R)
    assert during.turn_id == str(record.pk)
    assert (after.agent_id, after.turn_id) == ("", "")


def test_memproc_own_log_lines_pass_the_turn_as_extra(make_agent, model, caplog):
    @tool
    def broken() -> str:
        """Fails."""
        raise RuntimeError("boom")

    model.add(ModelResponse(tool_calls=[ToolCall("b1", "broken", {})]), "sorry")
    make_agent(tools=[broken]).generate("go", thread_id=T, resource_id=R)
    [failure] = [r for r in caplog.records if "tool broken failed" in r.getMessage()]
    assert (failure.agent_id, failure.thread_id, failure.resource_id) == ("test-agent", T, R)


@pytest.mark.django_db(transaction=True)
def test_async_turn_log_lines_carry_the_turn_in_worker_threads_and_on_the_loop(caplog):
    """An async turn's reads and input processors run in a worker thread, its model on the event
    loop: a log line from either carries the turn, including a thread id the turn made itself."""
    import logging

    from asgiref.sync import async_to_sync

    from memproc import Agent
    from memproc.logs import TurnContextFilter

    library = logging.getLogger("some.library")

    class LoggingInput:
        id = "logging-input"

        def process_input(self, ctx):
            library.warning("input hook")

    class LoopModel:
        id = "test/loop"

        def generate(self, request):
            raise AssertionError("the async driver awaits agenerate")

        async def agenerate(self, request):
            library.warning("model on the loop")
            return ModelResponse(text="ok")

    agent = Agent(
        id="async-logs", model=LoopModel(), memory=Memory(last_messages=4), input_processors=[LoggingInput()]
    )
    handler_filter = TurnContextFilter()
    caplog.handler.addFilter(handler_filter)
    try:
        with caplog.at_level(logging.WARNING, logger="some.library"):
            result = async_to_sync(agent.agenerate)("go", resource_id=R)
    finally:
        caplog.handler.removeFilter(handler_filter)
    lines = {r.getMessage(): r for r in caplog.records if r.name == "some.library"}
    record = TurnRecord.objects.get()
    for message in ("input hook", "model on the loop"):
        line = lines[message]
        assert (line.agent_id, line.thread_id, line.resource_id) == ("async-logs", result.thread_id, R)
        assert line.turn_id == str(record.pk)
