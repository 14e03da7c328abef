"""Client-side tools: a tool without a function suspends the turn the same way; the caller's answer
resumes it (Python and `POST pending/<id>/result/`)."""

from __future__ import annotations

import json

import pytest

from memproc import Tool
from memproc.agents import registry
from memproc.exceptions import ConfigurationError, PendingCallConflict, PendingCallNotFound, ValidationError
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


def test_the_sse_stream_ends_with_the_calls_tool_call_and_a_suspended_event_naming_it(client_agent, model):
    """No `tool-approval` (nobody approves it): the call's `tool-call` event, then `suspended` whose
    `pending` says the caller answers it (kind "client")."""
    owner = UserFactory()
    model.add(asks_location())
    response = client_for(owner).post(
        API + "agents/maps/stream/", {"messages": "Where am I?", "thread_id": "t1"}, format="json"
    )
    blocks = b"".join(response.streaming_content).decode().strip().split("\n\n")
    events = [(b.split("\n")[0].removeprefix("event: "), json.loads(b.split("data: ", 1)[1])) for b in blocks]
    assert [name for name, _ in events][-2:] == ["tool-call", "suspended"]
    assert events[-2][1] == {"id": "loc-1", "name": "get_location", "args": {"precision": "city"}}
    pending = events[-1][1]["pending"]
    assert (pending["kind"], pending["tool_call_id"], pending["tool_name"]) == (
        "client",
        "loc-1",
        "get_location",
    )
    assert events[-1][1]["messages"] == [] and not Message.objects.exists()


CHECKED = Tool(
    "get_location",
    "The user's location.",
    {"type": "object", "properties": {}},
    None,
    output_schema={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


def test_a_result_that_breaks_the_output_schema_is_refused_and_the_call_still_waits(make_agent, model):
    agent = registry.register(make_agent(id="maps", tools=[CHECKED]), replace=True)
    model.add(asks_location(), "You are in Lisbon.")
    try:
        pending = agent.generate("Where am I?", thread_id="t1", resource_id="u1").pending
        with pytest.raises(ValidationError, match="Invalid result for get_location"):
            approvals.submit_result(pending.id, result={"town": "Lisbon"}, resources=["u1"])
        assert PendingToolCall.objects.get().state == "pending" and not Message.objects.exists()
        done = approvals.submit_result(pending.id, result={"city": "Lisbon"}, resources=["u1"])
        assert done.text == "You are in Lisbon."
    finally:
        registry.unregister("maps")


def test_over_http_a_result_that_breaks_the_output_schema_is_a_400(make_agent, model):
    registry.register(make_agent(id="maps", tools=[CHECKED]), replace=True)
    owner = UserFactory()
    model.add(asks_location(), "You are in Lisbon.")
    try:
        pending = (
            client_for(owner)
            .post(
                API + "agents/maps/generate/", {"messages": "Where am I?", "thread_id": "t1"}, format="json"
            )
            .json()["pending"]
        )
        url = API + f"pending/{pending['id']}/result/"
        refused = client_for(owner).post(url, {"result": "Lisbon"}, format="json")
        assert refused.status_code == 400 and "Invalid result" in refused.json()["non_field_errors"][0]
        assert client_for(owner).post(url, {"result": {"city": "Lisbon"}}, format="json").status_code == 200
    finally:
        registry.unregister("maps")


@pytest.mark.parametrize(
    ("execute", "schema", "message"),
    [
        (lambda: "x", {"type": "object"}, "client-side tool's answer"),
        (None, ["not", "a", "schema"], "must be a valid JSON schema"),
        (None, {"type": "nonsense"}, "output_schema"),
    ],
)
def test_output_schema_is_for_client_side_tools_and_must_be_a_schema(execute, schema, message):
    with pytest.raises(ConfigurationError, match=message):
        Tool("t", "", {"type": "object", "properties": {}}, execute, output_schema=schema)
