"""Issue 16, item 13: input that would save something broken is refused with a 400 and field errors.

* An empty message (`{"messages": {}}`, `[{}]`, `""`, blank text) would be saved as an empty user
  message and sent to the model.
* A tool result that answers no tool call (neither in the request nor as the thread's last assistant
  message) would be saved and later sent to the provider as an orphan, which providers refuse.
* Thread and resource ids like "..", " ", "a/b", control characters, or 256 characters name files'
  folders and travel in URL paths; the grammar (1 to 255 printable characters, no "/", no whitespace
  at either end, not "." or "..") holds wherever a client chooses one, and the OpenAPI schema says so.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from rest_framework.test import APIClient

from memproc import Agent, Memory, models
from memproc.agents import register, unregister
from memproc.api.serializers.fields import ID_RULES
from memproc.testing import ScriptedModel
from tests.factories import MessageFactory, ThreadFactory

pytestmark = pytest.mark.django_db

API = "/api/memproc/"
AGENT = "bad-input"
GENERATE = API + f"agents/{AGENT}/generate/"
STREAM = API + f"agents/{AGENT}/stream/"
CHAT = API + f"agents/{AGENT}/chat/"
OPENAI = API + "v1/chat/completions"

BAD_IDS = {
    "dot": ".",
    "dot-dot": "..",
    "space": " ",
    "leading-space": " a",
    "trailing-newline": "a\n",
    "slash": "a/b",
    "too-long": "x" * 256,
    "control": "a\x07b",
    "nul": "a\x00b",
    "delete": "a\x7fb",
    "zero-width": "a\u200bb",
    "line-separator": "a\u2028b",
    "empty": "",
}
GOOD_IDS = ["support-1", "a.b", "...", "x" * 255, "über:Ω 1", "a b"]


# --- fixtures -------------------------------------------------------------------------------------


@pytest.fixture
def agent(model: ScriptedModel) -> Iterator[Agent]:
    agent = Agent(id=AGENT, instructions="You help.", model=model, memory=Memory(last_messages=10))
    register(agent, replace=True)
    yield agent
    unregister(AGENT)


@pytest.fixture
def client(user: Any) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def post(client: APIClient, path: str, body: Any) -> Any:
    return client.post(path, json.dumps(body), content_type="application/json")


def nothing_saved(model: ScriptedModel) -> None:
    assert model.calls == 0
    assert not models.Message.objects.exists()


# --- empty messages -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "messages",
    [
        {},
        [{}],
        "",
        "   ",
        {"role": "user", "content": ""},
        {"role": "user", "content": []},
        {"role": "user", "content": [{"type": "text", "text": ""}]},
        {"role": "user", "parts": []},
        {"role": "assistant", "content": ""},
    ],
    ids=repr,
)
@pytest.mark.parametrize("path", [GENERATE, STREAM], ids=["generate", "stream"])
def test_an_empty_message_is_a_field_error(client, agent, model, path, messages):
    response = post(client, path, {"messages": messages})
    assert response.status_code == 400, response.content
    errors = response.json()["messages"]
    assert list(errors) == ["0"] and list(errors["0"]) == ["content"], errors
    nothing_saved(model)


def test_the_error_names_the_empty_message_by_its_index(client, agent, model):
    response = post(client, GENERATE, {"messages": ["hello", {"role": "user", "content": ""}]})
    assert response.status_code == 400
    errors = response.json()["messages"]
    assert list(errors) == ["1"] and list(errors["1"]) == ["content"]
    assert "empty" in errors["1"]["content"][0]
    nothing_saved(model)


def test_a_message_with_only_a_file_or_a_tool_call_is_not_empty(client, agent, model):
    call = {"type": "tool-call", "tool_call_id": "c1", "tool_name": "lookup", "args": {}}
    result = {"type": "tool-result", "tool_call_id": "c1", "tool_name": "lookup", "result": "42"}
    messages = [
        {"role": "user", "content": "look it up"},
        {"role": "assistant", "content": [call]},
        {"role": "tool", "parts": [result]},
    ]
    response = post(client, GENERATE, {"messages": messages, "thread_id": "tools"})
    assert response.status_code == 200, response.content
    assert [m.role for m in models.Message.objects.order_by("sequence")] == [
        "user",
        "assistant",
        "tool",
        "assistant",
    ]


def test_an_empty_openai_message_is_a_400_in_openais_shape(client, agent, model):
    for content in ("", []):
        response = post(client, OPENAI, {"model": AGENT, "messages": [{"role": "user", "content": content}]})
        assert response.status_code == 400, response.content
        error = response.json()["error"]
        assert error["param"] == "messages" and error["type"] == "invalid_request_error"
    nothing_saved(model)


def test_an_empty_ai_sdk_message_is_a_400(client, agent, model):
    for parts in ([], [{"type": "text", "text": ""}]):
        body = {"id": "c1", "messages": [{"id": "u1", "role": "user", "parts": parts}]}
        response = post(client, CHAT, body)
        assert response.status_code == 400, response.content
        assert "messages" in response.json()
    nothing_saved(model)


# --- tool results without a call ------------------------------------------------------------------


def tool_result(call_id: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": "42"}


def assistant_call(call_id: str) -> dict[str, Any]:
    call = {"id": call_id, "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
    return {"role": "assistant", "content": "", "tool_calls": [call]}


@pytest.mark.parametrize(
    "messages, index",
    [
        ([tool_result("c1")], "0"),
        (["question", tool_result("c1")], "1"),
        # The call is left unanswered too: both messages are named.
        (["question", assistant_call("c1"), tool_result("c2")], "1 2"),
        (["question", assistant_call("c1"), "more", tool_result("c1")], "1 3"),
        ([{"role": "tool", "parts": [{"type": "text", "text": "no result in here"}]}], "0"),
        (
            [{"role": "user", "content": [{"type": "tool-result", "tool_call_id": "c1", "tool_name": "t"}]}],
            "0",
        ),
        (
            [{"role": "user", "content": [{"type": "tool-call", "tool_call_id": "c1", "tool_name": "t"}]}],
            "0",
        ),
    ],
)
@pytest.mark.parametrize("path", [GENERATE, STREAM], ids=["generate", "stream"])
def test_a_tool_result_without_its_call_is_a_field_error(client, agent, model, path, messages, index):
    response = post(client, path, {"messages": messages, "thread_id": "t1"})
    assert response.status_code == 400, response.content
    errors = response.json()["messages"]
    assert list(errors) == index.split(), errors
    assert all(set(found) <= {"tool_call_id", "content"} for found in errors.values())
    nothing_saved(model)


def test_a_tool_result_may_answer_the_threads_last_assistant_call(client, user, agent, model):
    resource = models.Resource.objects.get(pk=str(user.pk))
    thread = ThreadFactory(id="t1", resource=resource, last_sequence=2)
    MessageFactory(thread=thread, role="user", text="look it up", sequence=1)
    call = {"type": "tool-call", "tool_call_id": "c1", "tool_name": "lookup", "args": {}}
    MessageFactory(thread=thread, role="assistant", text="", content={"parts": [call]}, sequence=2)
    response = post(client, GENERATE, {"messages": [tool_result("c1")], "thread_id": "t1"})
    assert response.status_code == 200, response.content
    assert models.Message.objects.filter(thread__public_id="t1", role="tool").count() == 1

    # ... but only that message's calls, and only while it is the thread's last message.
    response = post(client, GENERATE, {"messages": [tool_result("c1")], "thread_id": "t1"})
    assert response.status_code == 400
    assert list(response.json()["messages"]["0"]) == ["tool_call_id"]


def test_a_tool_result_cannot_answer_a_call_of_a_thread_that_does_not_exist(client, agent, model):
    response = post(client, GENERATE, {"messages": [tool_result("c1")], "thread_id": "new"})
    assert response.status_code == 400
    nothing_saved(model)
    assert not models.Thread.objects.exists()


def test_openai_refuses_a_tool_result_whose_call_is_not_in_the_conversation(client, agent, model):
    for messages in (
        [tool_result("c1")],
        [tool_result("c1"), {"role": "user", "content": "q"}],
        [{"role": "user", "content": "q"}, tool_result("c1")],
        [{"role": "user", "content": "q"}, assistant_call("c1"), tool_result("c2")],
    ):
        response = post(client, OPENAI, {"model": AGENT, "messages": messages})
        assert response.status_code == 400, response.content
        assert response.json()["error"]["param"] == "messages"
    nothing_saved(model)


def test_openai_accepts_tool_results_that_answer_the_conversations_calls(client, agent, model):
    messages = [{"role": "user", "content": "q"}, assistant_call("c1"), tool_result("c1")]
    response = post(client, OPENAI, {"model": AGENT, "messages": messages})
    assert response.status_code == 200, response.content


# --- thread and resource ids ----------------------------------------------------------------------


@pytest.mark.parametrize("bad", BAD_IDS.values(), ids=BAD_IDS.keys())
def test_a_bad_thread_id_is_refused_everywhere_a_client_names_one(client, user, agent, model, bad):
    thread = ThreadFactory(id="mine", resource=models.Resource.objects.get(pk=str(user.pk)))
    ui_message = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "x"}]}
    cases = [
        (GENERATE, {"messages": "hi", "thread_id": bad}, "thread_id"),
        (STREAM, {"messages": "hi", "thread_id": bad}, "thread_id"),
        (API + "threads/", {"id": bad, "title": "t"}, "id"),
        (API + f"threads/{thread.public_id}/clone/", {"id": bad}, "id"),
        (CHAT, {"id": bad, "messages": [ui_message]}, "id"),
    ]
    for path, body, field in cases:
        response = post(client, path, body)
        assert response.status_code == 400, (path, response.content)
        assert field in response.json(), (path, response.json())
    nothing_saved(model)
    assert list(models.Thread.objects.values_list("public_id", flat=True)) == ["mine"]


@pytest.mark.parametrize("bad", [v for k, v in BAD_IDS.items() if k != "empty"])
def test_a_bad_thread_id_in_openai_metadata_is_a_400(client, agent, model, bad):
    """(An empty `metadata.thread_id` asks for a new thread, as no thread_id does.)"""
    body = {"model": AGENT, "messages": [{"role": "user", "content": "hi"}], "metadata": {"thread_id": bad}}
    response = post(client, OPENAI, body)
    assert response.status_code == 400, response.content
    assert response.json()["error"]["param"] == "metadata"
    nothing_saved(model)
    assert not models.Thread.objects.exists()


@pytest.mark.parametrize("bad", [v for k, v in BAD_IDS.items() if k != "empty"])
def test_a_bad_resource_id_is_a_field_error(client, agent, model, bad):
    for path, body in (
        (GENERATE, {"messages": "hi", "resource_id": bad}),
        (API + "threads/", {"title": "t", "resource_id": bad}),
    ):
        response = post(client, path, body)
        assert response.status_code == 400, (path, response.content)
        assert "resource_id" in response.json()
    nothing_saved(model)
    assert not models.Thread.objects.exists()


@pytest.mark.parametrize("bad", [v for k, v in BAD_IDS.items() if k != "empty"])
def test_a_bad_resource_id_in_the_protocols_is_a_400(client, agent, model, bad):
    openai = {
        "model": AGENT,
        "messages": [{"role": "user", "content": "hi"}],
        "metadata": {"resource_id": bad},
    }
    response = post(client, OPENAI, openai)
    assert response.status_code == 400, response.content
    assert response.json()["error"]["param"] == "metadata"
    chat = {
        "id": "chat-1",
        "resource_id": bad,
        "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}],
    }
    response = post(client, CHAT, chat)
    assert response.status_code == 400, response.content
    assert "resource_id" in response.json()
    nothing_saved(model)
    assert not models.Thread.objects.exists()


@pytest.mark.parametrize("good", GOOD_IDS)
def test_good_ids_are_accepted(client, agent, model, good):
    response = post(client, API + "threads/", {"id": good, "title": "t"})
    assert response.status_code == 201, response.content
    assert response.json()["id"] == good


def test_the_id_grammar_is_in_the_openapi_schema(client):
    schema = client.get(API + "schema/?format=json").json()
    components = schema["components"]["schemas"]
    for name, field in (
        ("GenerateRequest", "thread_id"),
        ("GenerateRequest", "resource_id"),
        ("ThreadCreate", "id"),
        ("ThreadCreate", "resource_id"),
        ("ThreadClone", "id"),
    ):
        prop = components[name]["properties"][field]
        assert ID_RULES in prop["description"], (name, field, prop)
        assert prop["maxLength"] == 255 and prop.get("pattern"), (name, field, prop)
