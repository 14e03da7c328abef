"""Client-side tools: a tool without a function suspends the turn the same way; the caller's answer
resumes it (Python and `POST pending/<id>/result/`)."""

from __future__ import annotations

import pytest

from memproc import Tool
from memproc.agents import registry
from memproc.exceptions import PendingCallConflict, PendingCallNotFound
from memproc.llm.types import ModelResponse, ToolCall
from memproc.models import Message, PendingToolCall
from memproc.services import approvals
from tests.api.conftest import client_for
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

API = "/api/memproc/"
LOCATION = Tool(
    "get_location",
    "The user's location, from their browser.",
    {"type": "object", "properties": {"precision": {"type": "string"}}},
    None,
)


@pytest.fixture
def client_agent(make_agent):
    agent = registry.register(make_agent(id="maps", tools=[LOCATION]), replace=True)
    yield agent
    registry.unregister("maps")


def asks_location() -> ModelResponse:
    return ModelResponse(
        tool_calls=[ToolCall("loc-1", "get_location", {"precision": "city"})], finish_reason="tool_calls"
    )


def test_a_client_tool_suspends_and_the_callers_result_resumes_the_turn(client_agent, model):
    model.add(asks_location(), "You are in Lisbon.")
    result = client_agent.generate("Where am I?", thread_id="t1", resource_id="u1")
    assert result.pending.kind == "client" and not Message.objects.exists()
    done = approvals.submit_result(result.pending.id, result={"city": "Lisbon"}, resources=["u1"])
    assert done.text == "You are in Lisbon."
    assert model.requests[1].messages[-1].tool_results[0].result == {"city": "Lisbon"}
    assert Message.objects.filter(thread__public_id="t1").count() == 4
    with pytest.raises(PendingCallConflict):
        approvals.submit_result(result.pending.id, result={}, resources=["u1"])
    with pytest.raises(PendingCallNotFound):
        approvals.approve(result.pending.id)  # nobody approves a client-side call


def test_another_resources_call_is_not_found(client_agent, model):
    model.add(asks_location())
    pending = client_agent.generate("Where am I?", thread_id="t1", resource_id="u1").pending
    with pytest.raises(PendingCallNotFound):
        approvals.submit_result(pending.id, result={}, resources=["someone-else"])
    assert PendingToolCall.objects.get().state == "pending"


def test_the_owner_posts_the_result_over_http(client_agent, model):
    owner = UserFactory()
    other = UserFactory()
    model.add(asks_location(), "Lisbon it is.")
    response = client_for(owner).post(
        API + "agents/maps/generate/", {"messages": "Where am I?", "thread_id": "t1"}, format="json"
    )
    pending = response.json()["pending"]
    assert pending["kind"] == "client"
    url = API + f"pending/{pending['id']}/result/"
    assert client_for(other).post(url, {"result": {"city": "Porto"}}, format="json").status_code == 404
    assert client_for(owner).post(url, {}, format="json").status_code == 400
    answered = client_for(owner).post(url, {"result": {"city": "Lisbon"}}, format="json")
    assert answered.status_code == 200 and answered.json()["text"] == "Lisbon it is."
    again = client_for(owner).post(url, {"result": {"city": "Lisbon"}}, format="json")
    assert again.status_code == 409
