"""Working-memory size limits (issue 20 item 4): `working_memory={"max_tokens": N}`."""

from __future__ import annotations

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from memproc import Agent, Memory, models
from memproc.agents import register, unregister
from memproc.exceptions import ConfigurationError, ValidationError
from memproc.llm.types import ModelResponse, ToolCall
from memproc.processors.tokens import get_token_counter
from memproc.processors.working_memory import WorkingMemory
from memproc.testing import ScriptedModel
from tests.factories import ResourceFactory, ThreadFactory, UserFactory

pytestmark = pytest.mark.django_db
T, R = "t1", "user-1"
LIMIT = 30
REFUSAL = f"working memory is limited to {LIMIT} tokens; rewrite it shorter"
LONG = "# User\n- Name: Ada\n- Facts: " + "likes very long lists of things, " * 20
SHORT = "# User\n- Name: Ada\n- Facts: likes lists"


def update(memory: str, call_id: str) -> ModelResponse:
    return ModelResponse(
        tool_calls=[ToolCall(call_id, "updateWorkingMemory", {"memory": memory})], finish_reason="tool_calls"
    )


def tool_results(request) -> list:
    return [r for m in request.messages for r in m.tool_results]


@pytest.fixture
def limited(make_agent, model):
    return make_agent(memory=Memory(working_memory={"max_tokens": LIMIT}))


def test_an_update_over_the_limit_is_refused_with_a_tool_result_the_model_sees(limited, model):
    model.add(update(LONG, "c1"), "Sorry, noted.")
    result = limited.generate("Remember all of this", thread_id=T, resource_id=R)
    [refusal] = tool_results(model.requests[1])
    assert refusal.is_error and REFUSAL in refusal.result
    assert result.text == "Sorry, noted."
    assert limited.memory.get_working_memory(resource_id=R) == ""
    assert not models.WorkingMemoryRevision.objects.exists()


def test_the_model_can_rewrite_it_shorter_in_the_same_turn(limited, model):
    model.add(update(LONG, "c1"), update(SHORT, "c2"), "Noted.")
    limited.generate("Remember all of this", thread_id=T, resource_id=R)
    refused, accepted = tool_results(model.requests[2])
    assert refused.is_error and not accepted.is_error
    assert limited.memory.get_working_memory(resource_id=R) == SHORT
    assert models.WorkingMemoryRevision.objects.count() == 1
    # The tool's calls are never saved, refused or not.
    assert not models.Message.objects.filter(role="tool").exists()


def test_the_instructions_state_the_limit(limited, model):
    model.add("hi")
    limited.generate("hello", thread_id=T, resource_id=R)
    system = next(m.text for m in model.requests[0].messages if m.id == "working-memory")
    assert f"Keep it under {LIMIT} tokens." in system


def test_a_schema_merge_over_the_limit_is_refused(make_agent, model):
    schema = {"type": "object", "properties": {"notes": {"type": "array", "items": {"type": "string"}}}}
    agent = make_agent(memory=Memory(working_memory={"schema": schema, "max_tokens": LIMIT}))
    model.add(update({"notes": ["a long note"] * 30}, "c1"), "ok")
    agent.generate("note it", thread_id=T, resource_id=R)
    [refusal] = tool_results(model.requests[1])
    assert refusal.is_error and REFUSAL in refusal.result


def test_writes_in_code_over_the_limit_raise_and_store_nothing():
    memory = Memory(working_memory={"max_tokens": LIMIT})
    with pytest.raises(ValidationError, match=REFUSAL):
        memory.update_working_memory(LONG, resource_id=R)
    assert memory.update_working_memory(SHORT, resource_id=R) == SHORT
    assert get_token_counter().count_text(SHORT) <= LIMIT


def test_the_limit_is_validated():
    for bad in (0, -1, True, "20"):
        with pytest.raises(ConfigurationError):
            WorkingMemory(max_tokens=bad)
        with pytest.raises(ConfigurationError):
            Memory(working_memory={"max_tokens": bad})


# --- the API and the admin ------------------------------------------------------------------------------


@pytest.fixture
def registered():
    agent = Agent(
        id="limited",
        model=ScriptedModel(),
        memory=Memory(working_memory={"max_tokens": LIMIT, "scope": "thread"}),
    )
    register(agent, replace=True)
    yield agent
    unregister("limited")


def test_an_api_write_over_the_limit_is_a_400(registered):
    user = UserFactory()
    thread = ThreadFactory(id="api-thread", resource=ResourceFactory(id=str(user.pk)), agent_id="limited")
    client = APIClient()
    client.force_authenticate(user)
    url = f"/api/memproc/threads/{thread.public_id}/working-memory/"
    refused = client.put(url, {"working_memory": LONG}, format="json")
    assert refused.status_code == 400
    assert REFUSAL in refused.json()["working_memory"][0]
    assert models.Thread.objects.get(pk=thread.pk).working_memory == ""
    assert client.put(url, {"working_memory": SHORT}, format="json").status_code == 200


def test_an_admin_edit_over_the_limit_is_a_form_error(admin_client, registered):
    thread = ThreadFactory(id="admin-thread", agent_id="limited")
    url = reverse("admin:memproc_thread_change", args=[thread.public_id])

    def post(text: str):
        return admin_client.post(
            url,
            {
                "title": thread.title,
                "metadata": "{}",
                "working_memory_text": text,
                "working_memory_seen_version": 0,
                "_save": "Save",
            },
        )

    refused = post(LONG)
    assert refused.status_code == 200 and REFUSAL in refused.content.decode()
    assert models.Thread.objects.get(pk=thread.pk).working_memory == ""
    assert post(SHORT).status_code == 302
    assert models.Thread.objects.get(pk=thread.pk).working_memory == SHORT


def test_a_resource_edit_in_the_admin_respects_the_strictest_resource_scoped_agent():
    from memproc.admin.working_memory import working_memory_limit

    agents = [
        Agent(id="wide", model=ScriptedModel(), memory=Memory(working_memory={"max_tokens": 500})),
        Agent(id="narrow", model=ScriptedModel(), memory=Memory(working_memory={"max_tokens": 50})),
        Agent(
            id="thready",
            model=ScriptedModel(),
            memory=Memory(working_memory={"max_tokens": 5, "scope": "thread"}),
        ),
    ]
    for agent in agents:
        register(agent, replace=True)
    try:
        assert working_memory_limit("resource", ResourceFactory(id="r")) == 50
        assert working_memory_limit("thread", ThreadFactory(id="x", agent_id="thready")) == 5
        assert working_memory_limit("thread", ThreadFactory(id="y", agent_id="unknown")) is None
    finally:
        for agent in agents:
            unregister(agent.id)
