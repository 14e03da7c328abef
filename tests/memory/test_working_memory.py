"""WorkingMemory: injection, scopes, Markdown and schema modes, the template guard, revisions, races."""

from __future__ import annotations

import json
import threading

import pytest
from django.db import connection

from memproc import Agent, Memory
from memproc.llm.types import ModelResponse, ToolCall
from memproc.models import Message as StoredMessage
from memproc.models import Resource, Thread, WorkingMemoryRevision
from memproc.processors.working_memory import DEFAULT_TEMPLATE
from memproc.services.working_memory import deep_merge, working_memory_update
from memproc.testing import ScriptedModel

pytestmark = pytest.mark.django_db
T, R = "t1", "user-1"


def update(memory) -> ModelResponse:
    return ModelResponse(tool_calls=[ToolCall("wm1", "updateWorkingMemory", {"memory": memory})])


def wm_system(model: ScriptedModel, call: int = -1) -> str:
    return next(m.text for m in model.requests[call].messages if m.id == "working-memory")


def test_default_template_is_injected_with_instructions_and_tool(make_agent, model):
    model.add("hi")
    make_agent(memory=Memory(working_memory=True)).generate("hello", thread_id=T, resource_id=R)
    text = wm_system(model)
    assert "updateWorkingMemory" in text and "<working_memory>" in text
    assert "# User Information" in text and "- **First Name**:" in text
    assert [t.name for t in model.requests[0].tools] == ["updateWorkingMemory"]


def test_markdown_update_is_saved_and_seen_in_the_next_turn(make_agent, model):
    agent = make_agent(memory=Memory(working_memory=True))
    doc = DEFAULT_TEMPLATE.replace("- **First Name**:", "- **First Name**: Ada")
    model.add(update(doc), "Hello Ada", "What else?")
    agent.generate("I'm Ada", thread_id=T, resource_id=R)
    assert Resource.objects.get(pk=R).working_memory == doc
    agent.generate("What's my name?", thread_id="another-thread", resource_id=R)
    assert "First Name**: Ada" in wm_system(model)  # resource scope: every thread of the user
    rev = WorkingMemoryRevision.objects.get()
    assert (rev.scope, rev.key, rev.source, rev.old, rev.new, rev.version) == (
        "resource",
        R,
        "model",
        "",
        doc,
        1,
    )


def test_thread_scope_keeps_memory_per_thread(make_agent, model):
    agent = make_agent(memory=Memory(working_memory={"scope": "thread", "template": "# Notes\n-"}))
    model.add(update("# Notes\n- likes tea"), "ok", "ok")
    agent.generate("I like tea", thread_id=T, resource_id=R)
    assert Thread.objects.get(public_id=T).working_memory == "# Notes\n- likes tea"
    agent.generate("new topic", thread_id="t2", resource_id=R)
    assert "likes tea" not in wm_system(model) and "# Notes\n-" in wm_system(model)


def test_update_equal_to_empty_template_is_refused_when_data_exists(make_agent, model):
    agent = make_agent(memory=Memory(working_memory=True))
    filled = DEFAULT_TEMPLATE.replace("- **Location**:", "- **Location**: Oslo")
    model.add(update(filled), "ok", update(DEFAULT_TEMPLATE), "ok")
    agent.generate("I live in Oslo", thread_id=T, resource_id=R)
    agent.generate("forget nothing", thread_id=T, resource_id=R)
    refusal = model.requests[-1].messages[-1].tool_results[0]
    assert refusal.is_error and "empty template" in refusal.result
    assert Resource.objects.get(pk=R).working_memory == filled


SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "prefs": {
            "type": "object",
            "properties": {"tea": {"type": "boolean"}, "coffee": {"type": "boolean"}},
        },
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "additionalProperties": False,
}


def test_schema_mode_deep_merges_deletes_with_null_and_replaces_arrays(make_agent, model):
    agent = make_agent(memory=Memory(working_memory={"schema": SCHEMA}))
    model.add(
        update({"name": "Ada", "prefs": {"tea": True}, "tags": ["a", "b"]}),
        "ok",
        update({"prefs": {"coffee": False}, "tags": ["c"], "name": None}),
        "ok",
    )
    agent.generate("one", thread_id=T, resource_id=R)
    agent.generate("two", thread_id=T, resource_id=R)
    assert json.loads(Resource.objects.get(pk=R).working_memory) == {
        "prefs": {"tea": True, "coffee": False},
        "tags": ["c"],
    }
    assert model.requests[0].tools[0].parameters["properties"]["memory"]["type"] == "object"


def test_schema_violation_is_a_tool_error_and_nothing_changes(make_agent, model):
    agent = make_agent(memory=Memory(working_memory={"schema": SCHEMA}))
    model.add(update({"age": 3}), "ok")
    agent.generate("I am three", thread_id=T, resource_id=R)
    result = model.requests[-1].messages[-1].tool_results[0]
    assert result.is_error and "schema" in result.result
    assert Resource.objects.get(pk=R).working_memory == "" and not WorkingMemoryRevision.objects.exists()


def test_read_only_memory_offers_no_tool(make_agent, model):
    model.add("ok")
    make_agent(memory=Memory(working_memory=True, read_only=True)).generate("hi", thread_id=T, resource_id=R)
    assert model.requests[0].tools == [] and "read-only" in wm_system(model)


def test_tool_calls_are_never_saved_to_history(make_agent, model):
    model.add(update("# User\n- Name: Ada"), "ok")
    make_agent(memory=Memory(working_memory=True)).generate("I'm Ada", thread_id=T, resource_id=R)
    assert "updateWorkingMemory" not in json.dumps(
        list(StoredMessage.objects.values_list("content", flat=True))
    )


def test_output_abort_discards_the_working_memory_update(make_agent, model):
    class Block:
        id = "block"

        def process_output_result(self, ctx):
            ctx.abort("no")

    model.add(update("# User\n- Name: Mallory"), "ok")
    make_agent(memory=Memory(working_memory=True), output_processors=[Block()]).generate(
        "I'm Mallory", thread_id=T, resource_id=R
    )
    assert not Resource.objects.filter(working_memory__contains="Mallory").exists()


def test_blocked_input_never_reaches_memory(make_agent, model):
    class Guard:
        id = "guard"

        def process_input(self, ctx):
            if "password" in ctx.new_messages[-1].text:
                ctx.abort("secret")

    memory = Memory(working_memory=True, semantic_recall=True)
    agent = make_agent(memory=memory, input_processors=[Guard()])
    model.add("first")
    agent.generate("hello", thread_id=T, resource_id=R)
    agent.generate("my password is hunter2", thread_id=T, resource_id=R)
    model.add("second")
    agent.generate("what did I say?", thread_id=T, resource_id=R)
    prompt = json.dumps([m.text for m in model.requests[-1].messages])
    assert "hunter2" not in prompt
    assert not StoredMessage.objects.filter(text__contains="hunter2").exists()
    from memproc.models import MessageEmbedding

    assert not MessageEmbedding.objects.filter(message__text__contains="hunter2").exists()
    assert "hunter2" not in (Resource.objects.get(pk=R).working_memory or "")


def test_deep_merge_rules():
    assert deep_merge({"a": {"b": 1, "c": 2}, "l": [1]}, {"a": {"c": None, "d": 3}, "l": [2]}) == {
        "a": {"b": 1, "d": 3},
        "l": [2],
    }


def test_api_and_admin_updates_record_their_source_and_actor(django_user_model):
    user = django_user_model.objects.create(username="op")
    Resource.objects.create(pk=R)
    working_memory_update(scope="resource", key=R, value="# Notes\n- VIP", source="admin", actor=user)
    rev = WorkingMemoryRevision.objects.get()
    assert (rev.source, rev.actor, rev.new) == ("admin", user, "# Notes\n- VIP")


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_schema_updates_from_several_threads_all_land():
    Resource.objects.create(pk=R)
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def writer(i: int) -> None:
        try:
            barrier.wait(timeout=10)
            for j in range(5):
                working_memory_update(
                    scope="resource", key=R, value={f"k{i}_{j}": j}, source="code", mode="schema"
                )
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            connection.close()

    workers = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
    assert not errors
    data = json.loads(Resource.objects.get(pk=R).working_memory)
    assert len(data) == 20
    assert WorkingMemoryRevision.objects.count() == 20
    assert sorted(WorkingMemoryRevision.objects.values_list("version", flat=True)) == list(range(1, 21))


def test_agent_level_echo_model_updates_working_memory(make_agent):
    agent = Agent(id="echo", model="local/echo", memory=Memory(working_memory=True))
    agent.generate("my name is Grace", thread_id=T, resource_id=R)
    assert "Grace" in Resource.objects.get(pk=R).working_memory


def test_a_change_made_while_the_model_answers_is_merged_not_lost(make_agent):
    """The turn writes against the value it read; an operator's change meanwhile makes that swap fail,
    and the model's change is merged into the new value (schema mode merges fields)."""

    def change_meanwhile(request):
        working_memory_update(scope="resource", key=R, value={"name": "Ada"}, source="code", mode="schema")
        return update({"prefs": {"tea": True}})

    agent = make_agent(
        model=ScriptedModel(["hi", change_meanwhile, "ok"]), memory=Memory(working_memory={"schema": SCHEMA})
    )
    agent.generate("one", thread_id=T, resource_id=R)
    agent.generate("two", thread_id=T, resource_id=R)
    resource = Resource.objects.get(pk=R)
    assert json.loads(resource.working_memory) == {"name": "Ada", "prefs": {"tea": True}}
    assert resource.working_memory_version == 2
    assert list(WorkingMemoryRevision.objects.order_by("version").values_list("source", flat=True)) == [
        "code",
        "model",
    ]


def test_two_changes_in_one_turn_each_land_once(make_agent):
    agent = make_agent(
        model=ScriptedModel([update({"name": "Ada"}), update({"prefs": {"tea": True}}), "ok"]),
        memory=Memory(working_memory={"schema": SCHEMA}),
    )
    agent.generate("one", thread_id=T, resource_id=R)
    resource = Resource.objects.get(pk=R)
    assert json.loads(resource.working_memory) == {"name": "Ada", "prefs": {"tea": True}}
    assert resource.working_memory_version == 2
