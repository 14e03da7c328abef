"""The approval API with real clients: a turn suspends at a gated tool over `generate/` and `stream/`,
a decider approves or rejects it at `pending/<id>/`, and the answer is the resumed turn's result."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import Permission

from memproc import tool
from memproc.llm.types import ModelResponse, ToolCall
from memproc.models import Message, PendingToolCall
from tests.api.conftest import client_for
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

API = "/api/memproc/"
RUNS: list[dict[str, Any]] = []


@tool(requires_approval=True)
def refund(order: str, amount: int) -> str:
    """Refunds an order."""
    RUNS.append({"order": order, "amount": amount})
    return f"refunded {amount} on {order}"


def calls_refund(amount: int = 10) -> ModelResponse:
    return ModelResponse(
        text="I will refund it.",
        tool_calls=[ToolCall("call-1", "refund", {"order": "A-1", "amount": amount})],
        finish_reason="tool_calls",
    )


@pytest.fixture(autouse=True)
def _runs():
    RUNS.clear()


@pytest.fixture
def refund_agent(make_agent):
    return make_agent(id="shop", tools=[refund])


@pytest.fixture
def decider():
    user = UserFactory(is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="change_pendingtoolcall"))
    return user


def suspend(owner_client, model) -> dict[str, Any]:
    model.add(calls_refund(), "Refunded.")
    response = owner_client.post(
        API + "agents/shop/generate/", {"messages": "Refund A-1", "thread_id": "t1"}, format="json"
    )
    assert response.status_code == 200, response.content
    return response.json()


def test_generate_answers_the_pending_call_and_saves_nothing(refund_agent, owner_client, model):
    body = suspend(owner_client, model)
    assert body["pending"]["tool_name"] == "refund" and body["pending"]["kind"] == "approval"
    assert body["pending"]["args"] == {"order": "A-1", "amount": 10}
    assert body["messages"] == [] and body["text"] == "I will refund it."
    assert not Message.objects.exists() and RUNS == []


def test_a_decider_sees_and_approves_the_call_and_gets_the_turns_result(
    refund_agent, owner_client, model, decider
):
    pending = suspend(owner_client, model)["pending"]
    client = client_for(decider)
    listed = client.get(API + "pending/").json()["results"]
    assert [p["id"] for p in listed] == [pending["id"]]
    assert (
        listed[0]["arguments"] == {"order": "A-1", "amount": 10} and listed[0]["text"] == "I will refund it."
    )
    detail = client.get(API + f"pending/{pending['id']}/")
    assert detail.status_code == 200 and detail.json()["state"] == "pending"

    approved = client.post(API + f"pending/{pending['id']}/approve/", {}, format="json")
    assert approved.status_code == 200, approved.content
    result = approved.json()
    assert result["text"] == "Refunded." and result["pending"] is None
    assert [m["role"] for m in result["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert RUNS == [{"order": "A-1", "amount": 10}]
    again = client.post(API + f"pending/{pending['id']}/approve/", {}, format="json")
    assert again.status_code == 409 and again.json()["code"] == "pending_conflict"
    assert client.get(API + "pending/").json()["results"] == []
    assert client.get(API + f"pending/{pending['id']}/").json()["state"] == "done"
    # the owner reads the whole turn in the thread
    messages = owner_client.get(API + "threads/t1/messages/").json()["results"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert RUNS == [{"order": "A-1", "amount": 10}]


def test_approve_with_edited_arguments(refund_agent, owner_client, model, decider):
    pending = suspend(owner_client, model)["pending"]
    response = client_for(decider).post(
        API + f"pending/{pending['id']}/approve/", {"arguments": {"order": "A-1", "amount": 5}}, format="json"
    )
    assert response.status_code == 200
    assert RUNS == [{"order": "A-1", "amount": 5}]


def test_reject_with_a_reason_resumes_the_turn_without_the_tool(refund_agent, owner_client, model, decider):
    pending = suspend(owner_client, model)["pending"]
    response = client_for(decider).post(
        API + f"pending/{pending['id']}/reject/", {"reason": "too much"}, format="json"
    )
    assert response.status_code == 200
    result = response.json()
    tool_message = result["messages"][2]
    part = tool_message["content"][0] if isinstance(tool_message.get("content"), list) else tool_message
    assert "too much" in json.dumps(part) and "rejected" in json.dumps(part)
    assert RUNS == []
    assert PendingToolCall.objects.get().state == "rejected"


@pytest.mark.parametrize(
    "body",
    [
        {"arguments": {"order": "A-1", "amount": "ten"}},
        {"arguments": {"order": "A-1"}},
        {"arguments": ["A-1"]},
        {"arguments": "A-1"},
    ],
)
def test_bad_edited_arguments_are_a_400_and_the_call_still_waits(
    refund_agent, owner_client, model, decider, body
):
    pending = suspend(owner_client, model)["pending"]
    response = client_for(decider).post(API + f"pending/{pending['id']}/approve/", body, format="json")
    assert response.status_code == 400, response.content
    assert PendingToolCall.objects.get().state == "pending" and RUNS == []


@pytest.mark.parametrize("body", [{"reason": ["x"]}, {"reason": {"a": 1}}, {"reason": "x" * 2001}])
def test_a_bad_reason_is_a_400(refund_agent, owner_client, model, decider, body):
    pending = suspend(owner_client, model)["pending"]
    response = client_for(decider).post(API + f"pending/{pending['id']}/reject/", body, format="json")
    assert response.status_code == 400, response.content
    assert PendingToolCall.objects.get().state == "pending"


def test_callers_who_may_not_decide_see_nothing_and_get_404(
    refund_agent, owner_client, other_client, staff_client, model, api_client
):
    pending = suspend(owner_client, model)["pending"]
    for client in (owner_client, other_client, staff_client):
        assert client.get(API + "pending/").json()["results"] == []
        for path, verb in (("", "get"), ("approve/", "post"), ("reject/", "post")):
            response = getattr(client, verb)(API + f"pending/{pending['id']}/{path}", {}, format="json")
            assert response.status_code == 404, (path, response.content)
    assert api_client.get(API + "pending/").status_code in (401, 403)
    assert PendingToolCall.objects.get().state == "pending" and RUNS == []


@pytest.mark.parametrize("pending_id", ["nope", "00000000-0000-0000-0000-000000000000", "%00"])
def test_an_unknown_id_is_a_404_never_a_500(decider, pending_id):
    client = client_for(decider)
    assert client.get(API + f"pending/{pending_id}/").status_code == 404
    assert client.post(API + f"pending/{pending_id}/approve/", {}, format="json").status_code == 404


def test_the_stream_ends_with_tool_approval_and_suspended_events(refund_agent, owner_client, model, decider):
    model.add(calls_refund(), "Refunded.")
    response = owner_client.post(
        API + "agents/shop/stream/", {"messages": "Refund A-1", "thread_id": "t1"}, format="json"
    )
    raw = b"".join(response.streaming_content).decode()
    events = [block.split("\n")[0].removeprefix("event: ") for block in raw.strip().split("\n\n")]
    assert events[-2:] == ["tool-approval", "suspended"], raw
    data = json.loads(raw.strip().split("\n\n")[-1].split("data: ", 1)[1])
    assert data["pending"]["tool_name"] == "refund"
    approved = client_for(decider).post(API + f"pending/{data['pending']['id']}/approve/", {}, format="json")
    assert approved.json()["text"] == "Refunded."


def test_chat_completions_answer_a_call_that_waits_for_approval_with_a_stop_saying_so(
    refund_agent, owner_client, model
):
    """Not `tool_calls`: the client does not run an approval-gated tool, a person decides it."""
    model.add(calls_refund())
    response = owner_client.post(
        API + "v1/chat/completions",
        {
            "model": "shop",
            "messages": [{"role": "user", "content": "Refund A-1"}],
            "metadata": {"thread_id": "t9"},
        },
        format="json",
    )
    assert response.status_code == 200, response.content
    body = response.json()
    choice, pending = body["choices"][0], body["metadata"]["pending"]
    assert choice["finish_reason"] == "stop" and "tool_calls" not in choice["message"]
    assert choice["message"]["content"].startswith("I will refund it.\n\nThe call refund(")
    assert f"waits for approval (pending call {pending['id']})" in choice["message"]["content"]
    assert (pending["tool_name"], pending["kind"], pending["args"]["amount"]) == ("refund", "approval", 10)
    assert body["memproc"]["pending"] == pending and body["metadata"]["thread_id"] == "t9"


def test_chat_completions_stream_ends_a_call_that_waits_for_approval_with_a_stop(
    refund_agent, owner_client, model
):
    model.add(calls_refund())
    response = owner_client.post(
        API + "v1/chat/completions",
        {
            "model": "shop",
            "stream": True,
            "messages": [{"role": "user", "content": "Refund A-1"}],
            "metadata": {"thread_id": "t9"},
        },
        format="json",
    )
    frames = [
        f.removeprefix("data: ") for f in b"".join(response.streaming_content).decode().split("\n\n") if f
    ]
    assert frames[-1] == "[DONE]"
    chunks = [json.loads(f) for f in frames[:-1]]
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["metadata"]["pending"]["tool_name"] == "refund"
    assert "waits for approval" in chunks[-2]["choices"][0]["delta"]["content"]
    assert not any(c["choices"][0]["delta"].get("tool_calls") for c in chunks)


def test_the_ai_sdk_chat_stream_of_a_suspended_turn_is_not_an_error(refund_agent, owner_client, model):
    model.add(calls_refund())
    response = owner_client.post(
        API + "agents/shop/chat/",
        {
            "id": "chat-1",
            "messages": [{"id": "ui-1", "role": "user", "parts": [{"type": "text", "text": "Refund A-1"}]}],
            "trigger": "submit-message",
        },
        format="json",
    )
    assert response.status_code == 200
    raw = b"".join(response.streaming_content).decode()
    assert '"type":"error"' not in raw.replace(" ", "")
    assert PendingToolCall.objects.filter(state="pending").count() == 1


@pytest.mark.django_db(transaction=True)
def test_approving_under_atomic_requests_resumes_the_turn_in_its_own_commit(
    refund_agent, owner_client, model, decider, monkeypatch, memproc_connection
):
    """A site with ATOMIC_REQUESTS: the decision and the resumed turn commit as they do without it,
    not with the request (which spans the tool and the model call)."""
    monkeypatch.setitem(memproc_connection.settings_dict, "ATOMIC_REQUESTS", True)
    pending = suspend(owner_client, model)["pending"]
    in_transaction: list[bool] = []
    monkeypatch.setattr(model, "generate", _noting(model.generate, memproc_connection, in_transaction))
    approved = client_for(decider).post(API + f"pending/{pending['id']}/approve/", {}, format="json")
    assert approved.status_code == 200, approved.content
    assert approved.json()["text"] == "Refunded." and RUNS == [{"order": "A-1", "amount": 10}]
    assert in_transaction == [False]
    assert PendingToolCall.objects.get().state == "done"


def _noting(generate, connection, seen: list[bool]):
    def noted(request):
        seen.append(connection.in_atomic_block)
        return generate(request)

    return noted
