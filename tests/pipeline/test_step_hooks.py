"""DESIGN §1 step hooks and §2 rules 18-22: process_input_step, process_output_step (veto, retry),
process_tool_result (redaction, abort), output hooks that see the responses only, system input,
per-call options and the blocked content kept for review."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from memproc import Memory, tool
from memproc.llm.types import ModelResponse, ToolCall
from memproc.messages import Message, TextPart, ToolResultPart
from memproc.models import Message as StoredMessage
from memproc.models import TripwireLog

pytestmark = pytest.mark.django_db

T, R = "t-steps", "user-steps"


def stored() -> list[tuple[str, str]]:
    return list(StoredMessage.objects.order_by("sequence").values_list("role", "text"))


def stored_parts() -> list[list[dict]]:
    return [c["parts"] for c in StoredMessage.objects.order_by("sequence").values_list("content", flat=True)]


def call(name: str, cid: str, **args) -> ModelResponse:
    return ModelResponse(tool_calls=[ToolCall(cid, name, args)])


@pytest.fixture
def side_effects() -> list[str]:
    return []


@pytest.fixture
def lookup(side_effects):
    @tool
    def lookup(city: str) -> dict:
        """Looks a city up."""
        side_effects.append(city)
        return {"city": city, "owner_email": "ann@example.com"}

    return lookup


@pytest.fixture
def delete_account(side_effects):
    @tool
    def delete_account(user: str) -> str:
        """Deletes an account."""
        side_effects.append(f"deleted {user}")
        return "deleted"

    return delete_account


# --- process_input_step -------------------------------------------------------------------------


class StepRecorder:
    id = "step-recorder"

    def __init__(self) -> None:
        self.seen: list[tuple[int, list[str]]] = []

    def process_input_step(self, ctx):
        self.seen.append((ctx.step, [m.role for m in ctx.messages]))


def test_input_step_runs_before_every_model_call_and_sees_tool_results(make_agent, model, lookup):
    recorder = StepRecorder()
    agent = make_agent(tools=[lookup], input_processors=[recorder])
    model.add(call("lookup", "c1", city="Oslo"), "Oslo it is")
    agent.generate("where?", thread_id=T, resource_id=R)
    assert recorder.seen == [(0, ["user"]), (1, ["user", "assistant", "tool"])]


def test_input_step_changes_one_call_not_what_is_saved(make_agent, model, lookup):
    class HideTools:
        id = "hide-tools"

        def process_input_step(self, ctx):
            if ctx.step == 1:
                ctx.tools = []  # the second call may not call tools again
                ctx.system_messages = [*ctx.system_messages, Message.create("system", "Answer now.")]
                return [*ctx.messages, Message.create("user", "(step note)")]
            return None

    agent = make_agent(tools=[lookup], input_processors=[HideTools()])
    model.add(call("lookup", "c1", city="Oslo"), "done")
    agent.generate("where?", thread_id=T, resource_id=R)
    first, second = model.requests
    assert [t.name for t in first.tools] == ["lookup"] and second.tools == []
    assert [m.text for m in second.messages if m.role == "system"][-1] == "Answer now."
    assert second.messages[-1].text == "(step note)"
    assert "(step note)" not in [text for _, text in stored()]


def test_input_step_abort_is_final_and_saves_nothing(make_agent, model, lookup):
    class StopAtSecondCall:
        id = "stop-second"

        def process_input_step(self, ctx):
            if ctx.step == 1:
                ctx.abort("Too many steps", retry=True)

    agent = make_agent(tools=[lookup], input_processors=[StopAtSecondCall()], max_processor_retries=2)
    model.add(call("lookup", "c1", city="Oslo"))
    result = agent.generate("where?", thread_id=T, resource_id=R)
    assert result.tripwire.phase == "input_step" and model.calls == 1
    assert stored() == []


# --- process_output_step ------------------------------------------------------------------------


class VetoDeletes:
    """A tool-call veto: drops every call of delete_account from this step's assistant message."""

    id = "veto-deletes"

    def process_output_step(self, ctx):
        if not any(c.name == "delete_account" for c in ctx.tool_calls):
            return None
        last = ctx.messages[-1]
        parts = tuple(p for p in last.parts if getattr(p, "tool_name", None) != "delete_account")
        parts = parts or (TextPart("I can't delete accounts."),)
        return [*ctx.messages[:-1], last.replace(parts=parts)]


def test_output_step_veto_means_the_call_never_runs(make_agent, model, side_effects, delete_account):
    agent = make_agent(tools=[delete_account], output_processors=[VetoDeletes()])
    model.add(call("delete_account", "c1", user="bob"))
    result = agent.generate("delete bob", thread_id=T, resource_id=R)
    assert side_effects == [] and model.calls == 1
    assert result.text == "I can't delete accounts."
    assert stored() == [("user", "delete bob"), ("assistant", "I can't delete accounts.")]


def test_output_step_veto_keeps_the_other_calls(make_agent, model, side_effects, lookup, delete_account):
    agent = make_agent(tools=[lookup, delete_account], output_processors=[VetoDeletes()])
    model.add(
        ModelResponse(
            tool_calls=[
                ToolCall("c1", "lookup", {"city": "Oslo"}),
                ToolCall("c2", "delete_account", {"user": "x"}),
            ]
        ),
        "ok",
    )
    agent.generate("go", thread_id=T, resource_id=R)
    assert side_effects == ["Oslo"]
    second = model.requests[1].messages
    assert [c.tool_call_id for m in second for c in m.tool_calls] == ["c1"]
    assert [r.tool_call_id for m in second for r in m.tool_results] == ["c1"]


def test_output_step_sees_responses_and_calls_not_the_input(make_agent, model, lookup):
    seen = []

    class Look:
        id = "look"

        def process_output_step(self, ctx):
            seen.append(([m.role for m in ctx.messages], [c.name for c in ctx.tool_calls], ctx.step))
            assert [m.text for m in ctx.input_messages] == ["where?"]

    agent = make_agent(tools=[lookup], output_processors=[Look()])
    model.add(call("lookup", "c1", city="Oslo"), "Oslo")
    agent.generate("where?", thread_id=T, resource_id=R)
    assert seen == [(["assistant"], ["lookup"], 0), (["assistant", "tool", "assistant"], [], 1)]


class RejectFirstDraft:
    id = "reject-draft"

    def __init__(self) -> None:
        self.calls = 0

    def process_output_step(self, ctx):
        self.calls += 1
        if "draft" in ctx.messages[-1].text:
            ctx.abort("No drafts", retry=True, metadata={"n": self.calls})


def test_output_step_retry_reruns_the_step_with_feedback(make_agent, model):
    agent = make_agent(output_processors=[RejectFirstDraft()], max_processor_retries=1)
    model.add("a draft", "final answer")
    result = agent.generate("hi", thread_id=T, resource_id=R)
    assert result.text == "final answer" and result.tripwire is None
    retry_request = model.requests[1].messages
    assert "a draft" not in [m.text for m in retry_request]
    assert any("[Processor Feedback]" in m.text and "No drafts" in m.text for m in retry_request)
    assert stored() == [("user", "hi"), ("assistant", "final answer")]


def test_output_step_retry_exhausted_is_a_tripwire_with_the_draft_logged(make_agent, model):
    agent = make_agent(output_processors=[RejectFirstDraft()])
    model.add("a draft")
    result = agent.generate("hi", thread_id=T, resource_id=R)
    assert result.tripwire.phase == "output_step" and result.tripwire.retry is True
    log = TripwireLog.objects.get()
    assert [(c["role"], c["parts"][0]["text"]) for c in log.content] == [
        ("user", "hi"),
        ("assistant", "a draft"),
    ]
    assert stored() == []


def test_per_call_max_processor_retries_overrides_the_agent(make_agent, model):
    agent = make_agent(output_processors=[RejectFirstDraft()], max_processor_retries=0)
    model.add("a draft", "clean")
    result = agent.generate("hi", thread_id=T, resource_id=R, max_processor_retries=1)
    assert result.text == "clean"


def test_stream_retry_event_comes_before_the_new_attempt(make_agent, model):
    agent = make_agent(output_processors=[RejectFirstDraft()], max_processor_retries=1)
    model.add("a draft", "final answer")
    events = list(agent.stream("hi", thread_id=T, resource_id=R))
    kinds = [e.type for e in events]
    retry_at = kinds.index("retry")
    before = "".join(e.text for e in events[:retry_at] if e.type == "text-delta")
    after = "".join(e.text for e in events[retry_at:] if e.type == "text-delta")
    assert before == "a draft" and after == "final answer"
    assert events[retry_at].tripwire.reason == "No drafts" and kinds[-1] == "finish"


def test_stream_output_result_retry_also_emits_retry(make_agent, model):
    class RejectOnce:
        id = "reject-once"

        def __init__(self):
            self.n = 0

        def process_output_result(self, ctx):
            self.n += 1
            if self.n == 1:
                ctx.abort("Again", retry=True)

    agent = make_agent(output_processors=[RejectOnce()], max_processor_retries=1)
    model.add("one", "two")
    kinds = [e.type for e in agent.stream("hi", thread_id=T, resource_id=R)]
    assert kinds.count("retry") == 1 and kinds.index("retry") < len(kinds) - 1


def test_streamed_tool_calls_are_announced_only_when_they_run(make_agent, model, delete_account):
    agent = make_agent(tools=[delete_account], output_processors=[VetoDeletes()])
    model.add(call("delete_account", "c1", user="bob"))
    events = list(agent.stream("delete bob", thread_id=T, resource_id=R))
    assert "tool-call" not in [e.type for e in events]


# --- process_tool_result ------------------------------------------------------------------------


class RedactEmails:
    """A tool-result redaction: the model and the history never see the e-mail address."""

    id = "redact-emails"

    def process_tool_result(self, ctx, result):
        if isinstance(result.result, Mapping) and "owner_email" in result.result:  # results are frozen
            return ToolResultPart(
                result.tool_call_id,
                result.tool_name,
                {**result.result, "owner_email": "[redacted]"},
                result.is_error,
            )
        return None


def test_tool_result_redaction_reaches_the_model_and_storage(make_agent, model, lookup):
    agent = make_agent(tools=[lookup], input_processors=[RedactEmails()])
    model.add(call("lookup", "c1", city="Oslo"), "found it")
    agent.generate("where?", thread_id=T, resource_id=R)
    results = [r.result for m in model.requests[1].messages for r in m.tool_results]
    assert results == [{"city": "Oslo", "owner_email": "[redacted]"}]
    saved_results = [p["result"] for parts in stored_parts() for p in parts if p["type"] == "tool-result"]
    assert saved_results == [{"city": "Oslo", "owner_email": "[redacted]"}]


def test_tool_result_abort_saves_nothing_and_logs_the_blocked_result(make_agent, model, side_effects, lookup):
    class BlockEmails:
        id = "block-emails"

        def process_tool_result(self, ctx, result):
            if "@" in str(result.result):
                ctx.abort("Tool leaked an e-mail address")

    agent = make_agent(tools=[lookup], output_processors=[BlockEmails()])
    model.add(call("lookup", "c1", city="Oslo"))
    result = agent.generate("where?", thread_id=T, resource_id=R)
    assert result.tripwire.phase == "tool_result" and side_effects == ["Oslo"]
    assert stored() == [] and model.calls == 1
    content = TripwireLog.objects.get().content
    assert [c["role"] for c in content] == ["user", "assistant", "tool"]
    assert content[2]["parts"][0]["result"]["owner_email"] == "ann@example.com"


def test_tool_result_hook_must_return_a_result_for_the_same_call(make_agent, model, lookup):
    class Wrong:
        id = "wrong"

        def process_tool_result(self, ctx, result):
            return "not a part"

    agent = make_agent(tools=[lookup], output_processors=[Wrong()])
    model.add(call("lookup", "c1", city="Oslo"))
    with pytest.raises(TypeError, match="ToolResultPart"):
        agent.generate("where?", thread_id=T, resource_id=R)
    assert stored() == []


# --- output hooks see the responses -------------------------------------------------------------


class ContentBlocker:
    """The seed's contentBlocker, ported as written: it checks ctx.messages."""

    id = "content-blocker"

    def process_output_result(self, ctx):
        if any("badword" in m.text for m in ctx.messages):
            ctx.abort("Blocked word in the response")


def test_output_hooks_see_the_response_not_the_users_input(make_agent, model):
    agent = make_agent(output_processors=[ContentBlocker()])
    model.add("a clean reply")
    result = agent.generate("I typed badword", thread_id=T, resource_id=R)
    assert result.tripwire is None
    assert stored() == [("user", "I typed badword"), ("assistant", "a clean reply")]


def test_output_block_logs_the_blocked_reply_with_the_input(make_agent, model):
    agent = make_agent(output_processors=[ContentBlocker()])
    model.add("a badword reply")
    result = agent.generate("hello", thread_id=T, resource_id=R)
    assert result.tripwire.phase == "output"
    content = TripwireLog.objects.get().content
    assert [(c["role"], c["parts"][0]["text"]) for c in content] == [
        ("user", "hello"),
        ("assistant", "a badword reply"),
    ]


def test_stream_block_logs_what_was_streamed(make_agent, model):
    class StreamBlock:
        id = "stream-block"

        def process_output_stream(self, ctx, part):
            if "secret" in part.text:
                ctx.abort("No secrets")
            return part

    agent = make_agent(output_processors=[StreamBlock()])
    model.add("here is the secret code")
    events = list(agent.stream("hi", thread_id=T, resource_id=R))
    assert events[-1].type == "tripwire"
    content = TripwireLog.objects.get().content
    assert content[0]["parts"][0]["text"] == "hi" and content[1]["role"] == "assistant"
    assert "here is the" in content[1]["parts"][0]["text"]


# --- rule 18: system messages in the input ------------------------------------------------------


def test_system_input_is_used_after_the_instructions_and_never_saved(make_agent, model):
    model.add("ok")
    make_agent().generate(
        [{"role": "system", "content": "Answer in French."}, {"role": "user", "content": "hi"}],
        thread_id=T,
        resource_id=R,
    )
    system = [m.text for m in model.requests[0].messages if m.role == "system"]
    assert system == ["You are a test agent.", "Answer in French."]
    assert stored() == [("user", "hi"), ("assistant", "ok")]


def test_only_system_input_is_refused(make_agent):
    from memproc.exceptions import ValidationError

    with pytest.raises(ValidationError, match="not a system message"):
        make_agent().generate({"role": "system", "content": "x"}, thread_id=T, resource_id=R)


# --- rules 21-22: the seed's enabled form and per-call memory options ---------------------------


def test_seed_enabled_form_is_accepted():
    memory = Memory(semantic_recall={"enabled": True, "top_k": 2}, working_memory={"enabled": True})
    assert memory.recall_options["top_k"] == 2 and memory.working_memory_options is not None
    off = Memory(semantic_recall={"enabled": False}, working_memory={"enabled": False})
    assert off.recall_options is None and off.working_memory_options is None


def test_seed_enabled_form_rejects_a_non_boolean():
    from memproc.exceptions import ConfigurationError

    with pytest.raises(ConfigurationError):
        Memory(semantic_recall={"enabled": "yes"})


def test_memory_options_read_only_for_one_call(make_agent, model):
    agent = make_agent()
    model.add("one", "two", "three")
    agent.generate("first", thread_id=T, resource_id=R)
    agent.generate("peek", thread_id=T, resource_id=R, memory_options={"read_only": True})
    assert [m.text for m in model.requests[1].messages][1:] == ["first", "one", "peek"]
    agent.generate("third", thread_id=T, resource_id=R)
    assert [text for _, text in stored()] == ["first", "one", "third", "three"]


def test_memory_options_last_messages_for_one_call(make_agent, model):
    agent = make_agent()
    model.add("one", "two")
    agent.generate("first", thread_id=T, resource_id=R)
    agent.generate("second", thread_id=T, resource_id=R, memory_options={"last_messages": 0})
    assert [m.text for m in model.requests[1].messages][1:] == ["second"]
    assert len(stored()) == 4  # the window only changes what is loaded


def test_memory_options_unknown_key_is_a_clear_error(make_agent):
    from memproc.exceptions import ValidationError

    with pytest.raises(ValidationError, match="unknown keys: colour"):
        make_agent().generate("x", thread_id=T, resource_id=R, memory_options={"colour": "red"})


def test_memory_options_enable_working_memory_for_one_call(make_agent, model):
    agent = make_agent()
    model.add("ok")
    agent.generate("x", thread_id=T, resource_id=R, memory_options={"working_memory": {"enabled": True}})
    assert any(m.id == "working-memory" for m in model.requests[0].messages)
    assert agent.memory.working_memory_options is None  # the agent's own Memory is unchanged
