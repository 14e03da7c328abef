"""Requests whose shape a provider would refuse, or that would lose a message, are a 400 before any
model call (findings 16 and 18 of the third hostile review: a second message with the same id was
dropped silently; an unanswered tool call reached the provider and came back as a 502)."""

from __future__ import annotations

from typing import Any

import pytest

from memproc import Agent, Memory, models
from memproc.exceptions import ValidationError
from memproc.testing import ScriptedModel
from tests.api.conftest import API

GENERATE = API + "agents/api-test/generate/"
STREAM = API + "agents/api-test/stream/"
COMPLETIONS = API + "v1/chat/completions"
CHAT = API + "agents/api-test/chat/"

CALL = {"type": "tool-call", "tool_call_id": "c1", "tool_name": "lookup", "args": {}}
UNANSWERED = [
    {"role": "user", "content": "look it up"},
    {"role": "assistant", "content": [CALL]},
    {"role": "user", "content": "never mind, just answer"},
]


def post(client: Any, url: str, body: Any) -> Any:
    return client.post(url, body, format="json")


@pytest.mark.django_db
@pytest.mark.parametrize("url", [GENERATE, STREAM])
def test_two_messages_with_one_id_are_a_400(owner_client, agent, model, resource, url):
    body = {
        "messages": [
            {"id": "m1", "role": "user", "content": "first"},
            {"id": "m1", "role": "user", "content": "second"},
        ]
    }
    response = post(owner_client, url, body)
    assert response.status_code == 400
    assert "used twice" in str(response.json()["messages"])
    assert model.calls == 0 and not models.Message.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("url", [GENERATE, STREAM])
def test_an_unanswered_tool_call_is_a_400_before_the_model(owner_client, agent, model, resource, url):
    response = post(owner_client, url, {"messages": UNANSWERED})
    assert response.status_code == 400
    assert "has no result" in str(response.json()["messages"])
    assert model.calls == 0 and not models.Message.objects.exists()


@pytest.mark.django_db
def test_an_unanswered_tool_call_in_a_chat_completions_conversation_is_a_400(
    owner_client, agent, model, resource
):
    conversation = [
        {"role": "user", "content": "look it up"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
            ],
        },
        {"role": "user", "content": "never mind"},
    ]
    response = post(owner_client, COMPLETIONS, {"model": "api-test", "messages": conversation})
    assert response.status_code == 400, response.content
    assert model.calls == 0


@pytest.mark.django_db
def test_an_answered_tool_call_still_passes(owner_client, agent, model, resource):
    model.add("done")
    messages = [*UNANSWERED[:2], {"role": "tool", "tool_call_id": "c1", "content": "found it"}]
    response = post(owner_client, GENERATE, {"messages": messages})
    assert response.status_code == 200, response.content


@pytest.mark.django_db
def test_the_python_api_refuses_both_too() -> None:
    model = ScriptedModel(["never"])
    agent = Agent(id="shapes", model=model, memory=Memory())
    with pytest.raises(ValidationError, match="used twice"):
        agent.generate(
            [{"id": "m1", "role": "user", "content": "a"}, {"id": "m1", "role": "user", "content": "b"}],
            thread_id="t",
            resource_id="r",
        )
    with pytest.raises(ValidationError, match="has no result"):
        agent.generate(UNANSWERED, thread_id="t", resource_id="r")
    assert model.calls == 0 and not models.Message.objects.exists()
