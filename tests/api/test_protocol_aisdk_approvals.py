"""`agents/<id>/chat/` and calls that wait: a turn that suspends at an approval-gated or client-side tool
ends its UI-message stream with the call (and `tool-approval-request`); `useChat` answers by resending
the conversation with that assistant message in state `approval-responded` (or with the client tool's
output), and the resumed turn streams back as the continuation of the same message.
(tests/api/test_protocol_aisdk_approvals_js.py does the same with the SDK's own client.)"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import Permission
from django.db import connections
from django.test import AsyncClient

from memproc import Tool, models, tool
from memproc.exceptions import ConfigurationError
from memproc.llm.types import ModelResponse, ToolCall
from memproc.services import approvals
from tests.api.conftest import API, client_for
from tests.api.test_protocol_aisdk import frames, ui

CHAT = API + "agents/shop/chat/"
RUNS: list[dict[str, Any]] = []


@tool(requires_approval=True)
def refund(order: str, amount: int) -> str:
    """Refunds an order."""
    RUNS.append({"order": order, "amount": amount})
    return f"refunded {amount} on {order}"


@tool
def lookup(order: str) -> str:
    """Looks an order up."""
    RUNS.append({"lookup": order})
    return f"{order} is paid"


LOCATION = Tool(
    "get_location",
    "The user's location, from their browser.",
    {"type": "object", "properties": {"precision": {"type": "string"}}},
    None,
    output_schema={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


def calls(*tool_calls: ToolCall, text: str = "") -> ModelResponse:
    return ModelResponse(text=text, tool_calls=list(tool_calls), finish_reason="tool_calls")


REFUND = ToolCall("call-1", "refund", {"order": "A-1", "amount": 10})
LOCATE = ToolCall("loc-1", "get_location", {"precision": "city"})


@pytest.fixture(autouse=True)
def _runs():
    RUNS.clear()


@pytest.fixture
def shop(make_agent):
    return make_agent(id="shop", tools=[refund, lookup, LOCATION])


@pytest.fixture
def decider(user):
    """The chat's own user, allowed to decide the gated tool's calls."""
    user.user_permissions.add(Permission.objects.get(codename="change_pendingtoolcall"))
    return user


def chat(client: Any, chat_id: str, *messages: dict[str, Any]) -> Any:
    return client.post(CHAT, {"id": chat_id, "messages": list(messages)}, format="json")


def assistant_message(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """The UI message `useChat` builds from a stream's chunks (text, steps and tool parts)."""
    message: dict[str, Any] = {"id": chunks[0]["messageId"], "role": "assistant", "parts": []}
    tools: dict[str, dict[str, Any]] = {}
    for c in chunks:
        if c["type"] == "start-step":
            message["parts"].append({"type": "step-start"})
        elif c["type"] == "text-start":
            message["parts"].append({"type": "text", "text": "", "state": "done"})
        elif c["type"] == "text-delta":
            message["parts"][-1]["text"] += c["delta"]
        elif c["type"] == "tool-input-available":
            part = {
                "type": f"tool-{c['toolName']}",
                "toolCallId": c["toolCallId"],
                "state": "input-available",
                "input": c["input"],
            }
            tools[c["toolCallId"]] = part
            message["parts"].append(part)
        elif c["type"] == "tool-approval-request":
            tools[c["toolCallId"]].update(state="approval-requested", approval={"id": c["approvalId"]})
    return message


def answered(message: dict[str, Any], call_id: str, **change: Any) -> dict[str, Any]:
    """`message` with the tool part of `call_id` changed, as addToolApprovalResponse or addToolOutput do."""
    parts = [
        {**p, **change} if p.get("toolCallId") == call_id else p
        for p in json.loads(json.dumps(message["parts"]))
    ]
    return {**message, "parts": parts}


def approval(
    message: dict[str, Any], call_id: str, approved: bool, reason: str | None = None
) -> dict[str, Any]:
    part = next(p for p in message["parts"] if p.get("toolCallId") == call_id)
    decided = {"id": part["approval"]["id"], "approved": approved, **({"reason": reason} if reason else {})}
    return answered(message, call_id, state="approval-responded", approval=decided)


def stored(thread_id: str) -> list[models.Message]:
    return list(models.Message.objects.filter(thread__public_id=thread_id).order_by("sequence"))


def suspend(client: Any, model: Any, chat_id: str = "c1", *script: Any) -> tuple[dict, dict, list]:
    model.add(*(script or (calls(REFUND, text="I will refund it."), "Refunded.")))
    user = ui("u1", "user", "Refund A-1")
    response = chat(client, chat_id, user)
    assert response.status_code == 200, response.content
    chunks = frames(response)
    return user, assistant_message(chunks), chunks


# --- the suspended stream -----------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_gated_call_ends_the_stream_with_an_approval_request(owner_client, shop, model, resource):
    _, message, chunks = suspend(owner_client, model)
    assert [c["type"] for c in chunks] == [
        "start",
        "start-step",
        "text-start",
        *["text-delta"] * 4,
        "text-end",
        "tool-input-available",
        "tool-approval-request",
        "finish-step",
        "finish",
    ]
    pending = models.PendingToolCall.objects.get()
    assert chunks[-3] == {
        "type": "tool-approval-request",
        "approvalId": str(pending.pk),
        "toolCallId": "call-1",
    }
    finish = chunks[-1]
    assert finish["finishReason"] == "tool-calls"
    assert finish["messageMetadata"]["pending"]["id"] == str(pending.pk)
    assert finish["messageMetadata"]["pending"]["kind"] == "approval"
    assert finish["messageMetadata"]["message_ids"] == []
    assert message["parts"][-1]["state"] == "approval-requested"
    assert not models.Message.objects.exists() and RUNS == []


@pytest.mark.django_db
def test_a_client_call_ends_the_stream_with_its_input_only(owner_client, shop, model, resource):
    _, _, chunks = suspend(owner_client, model, "c1", calls(LOCATE))
    assert [c["type"] for c in chunks] == [
        "start",
        "start-step",
        "tool-input-available",
        "finish-step",
        "finish",
    ]
    assert chunks[2]["toolName"] == "get_location" and chunks[2]["input"] == {"precision": "city"}
    assert chunks[-1]["finishReason"] == "tool-calls"
    assert chunks[-1]["messageMetadata"]["pending"]["kind"] == "client"


# --- deciding from the chat ---------------------------------------------------------------------------


@pytest.mark.django_db
def test_approving_streams_the_resumed_turn_as_the_same_message(owner_client, shop, model, decider, resource):
    user, message, _ = suspend(owner_client, model)
    response = chat(owner_client, "c1", user, approval(message, "call-1", True))
    assert response.status_code == 200, response.content
    chunks = frames(response)
    assert [c["type"] for c in chunks] == [
        "start",
        "tool-output-available",
        "start-step",
        "text-start",
        "text-delta",
        "text-end",
        "finish-step",
        "finish",
    ]
    assert chunks[0]["messageId"] == message["id"]  # useChat continues the same message
    assert chunks[1] == {
        "type": "tool-output-available",
        "toolCallId": "call-1",
        "output": "refunded 10 on A-1",
    }
    assert chunks[-1]["finishReason"] == "stop" and chunks[-1]["messageMetadata"]["pending"] is None
    assert RUNS == [{"order": "A-1", "amount": 10}]
    rows = stored("c1")
    assert [r.role for r in rows] == ["user", "assistant", "tool", "assistant"]  # one save, one turn
    assert rows[0].public_id == "u1" and rows[-1].text == "Refunded."
    assert chunks[-1]["messageMetadata"]["message_ids"] == [r.public_id for r in rows]
    pending = models.PendingToolCall.objects.get()
    assert (pending.state, pending.decided_by_id) == ("done", decider.pk)

    # The same answer again: the call is no longer pending.
    again = chat(owner_client, "c1", user, approval(message, "call-1", True))
    assert again.status_code == 409 and again.json()["code"] == "pending_conflict"
    assert RUNS == [{"order": "A-1", "amount": 10}] and len(stored("c1")) == 4


@pytest.mark.django_db
def test_rejecting_with_a_reason_denies_the_call_and_the_model_reads_why(
    owner_client, shop, model, decider, resource
):
    user, message, _ = suspend(owner_client, model, "c1", calls(REFUND), "I did not refund it.")
    chunks = frames(chat(owner_client, "c1", user, approval(message, "call-1", False, "too much")))
    assert chunks[1] == {"type": "tool-output-denied", "toolCallId": "call-1"}
    assert chunks[-1]["finishReason"] == "stop"
    assert RUNS == []
    seen = model.requests[-1].messages[-1].tool_results[0]
    assert seen.is_error and seen.result == "The call was rejected and did not run: too much"
    rows = stored("c1")
    assert [r.role for r in rows] == ["user", "assistant", "tool", "assistant"]
    result = rows[2].content["parts"][0]
    assert result["result"] == "The call was rejected and did not run: too much" and result["is_error"]
    pending = models.PendingToolCall.objects.get()
    assert (pending.state, pending.reason) == ("rejected", "too much")


@pytest.mark.django_db
def test_the_next_message_saves_only_itself(owner_client, shop, model, decider, resource):
    user, message, _ = suspend(owner_client, model)
    chunks = frames(chat(owner_client, "c1", user, approval(message, "call-1", True)))
    done = answered(
        approval(message, "call-1", True),
        "call-1",
        state="output-available",
        output=chunks[1]["output"],
    )
    done["parts"] += [{"type": "step-start"}, {"type": "text", "text": "Refunded.", "state": "done"}]
    model.add("You are welcome.")
    frames(chat(owner_client, "c1", user, done, ui("u2", "user", "thanks")))
    assert [r.role for r in stored("c1")] == ["user", "assistant", "tool", "assistant", "user", "assistant"]
    assert [m.role for m in model.requests[-1].messages if m.role != "system"] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
    ]


@pytest.mark.django_db
def test_a_client_tools_output_resumes_the_turn(owner_client, shop, model, resource):
    user, message, _ = suspend(owner_client, model, "c1", calls(LOCATE), "You are in Lisbon.")
    output = answered(message, "loc-1", state="output-available", output={"city": "Lisbon"})
    chunks = frames(chat(owner_client, "c1", user, output))
    assert chunks[0]["messageId"] == message["id"]
    assert chunks[1] == {"type": "tool-output-available", "toolCallId": "loc-1", "output": {"city": "Lisbon"}}
    assert chunks[-1]["finishReason"] == "stop"
    assert model.requests[-1].messages[-1].tool_results[0].result == {"city": "Lisbon"}
    assert [r.role for r in stored("c1")] == ["user", "assistant", "tool", "assistant"]
    assert models.PendingToolCall.objects.get().state == "done"
    assert chat(owner_client, "c1", user, output).status_code == 409


@pytest.mark.django_db
def test_a_client_tools_error_is_the_calls_error(owner_client, shop, model, resource):
    user, message, _ = suspend(owner_client, model, "c1", calls(LOCATE), "No location, then.")
    failed = answered(message, "loc-1", state="output-error", errorText="Permission denied by the browser")
    chunks = frames(chat(owner_client, "c1", user, failed))
    assert chunks[1]["type"] == "tool-output-error"
    seen = model.requests[-1].messages[-1].tool_results[0]
    assert seen.is_error and seen.result == "Permission denied by the browser"


@pytest.mark.django_db
def test_a_client_output_the_schema_refuses_is_a_400_and_the_call_still_waits(
    owner_client, shop, model, resource
):
    user, message, _ = suspend(owner_client, model, "c1", calls(LOCATE))
    wrong = answered(message, "loc-1", state="output-available", output={"town": "Lisbon"})
    response = chat(owner_client, "c1", user, wrong)
    assert response.status_code == 400
    assert "city" in json.dumps(response.json())
    assert models.PendingToolCall.objects.get().state == "pending"
    assert not models.Message.objects.exists() and model.calls == 1


@pytest.mark.django_db
def test_a_user_who_may_not_decide_gets_a_403_and_the_call_still_waits(owner_client, shop, model, resource):
    user, message, _ = suspend(owner_client, model)
    response = chat(owner_client, "c1", user, approval(message, "call-1", True))
    assert response.status_code == 403
    assert response.json()["code"] == "permission_denied"
    assert models.PendingToolCall.objects.get().state == "pending"
    assert RUNS == [] and not models.Message.objects.exists()


@pytest.mark.django_db
def test_a_tool_that_lets_the_conversations_user_decide(owner_client, make_agent, model, user, resource):
    @tool(requires_approval=lambda actor, pending: str(actor.pk) == pending.resource_id)
    def refund(order: str, amount: int) -> str:
        """Refunds an order."""
        return "refunded"

    make_agent(id="shop", tools=[refund])
    first, message, _ = suspend(owner_client, model)
    assert frames(chat(owner_client, "c1", first, approval(message, "call-1", True)))[-1]["type"] == "finish"
    assert models.PendingToolCall.objects.get().state == "done"


@pytest.mark.django_db
def test_a_forged_or_foreign_approval_id_is_a_404(owner_client, shop, model, decider, resource, other_user):
    user, message, _ = suspend(owner_client, model)
    for forged in (str(uuid.uuid4()), "not-a-uuid"):
        bad = answered(
            message, "call-1", state="approval-responded", approval={"id": forged, "approved": True}
        )
        response = chat(owner_client, "c1", user, bad)
        assert response.status_code == 404 and response.json()["code"] == "not_found"
    # The call of another chat, and of another user's chat with the same id.
    assert chat(owner_client, "c2", user, approval(message, "call-1", True)).status_code == 404
    other_client = client_for(other_user)
    other_user.user_permissions.add(Permission.objects.get(codename="change_pendingtoolcall"))
    assert chat(other_client, "c1", user, approval(message, "call-1", True)).status_code == 404
    assert models.PendingToolCall.objects.get().state == "pending" and RUNS == []


@pytest.mark.django_db
def test_a_call_decided_elsewhere_is_a_409(owner_client, shop, model, decider, resource):
    user, message, _ = suspend(owner_client, model)
    approvals.reject(models.PendingToolCall.objects.get().pk, reason="no")
    response = chat(owner_client, "c1", user, approval(message, "call-1", True))
    assert response.status_code == 409 and response.json()["code"] == "pending_conflict"
    assert RUNS == []


@pytest.mark.django_db
def test_a_malformed_approval_is_a_400(owner_client, shop, model, decider, resource):
    user, message, _ = suspend(owner_client, model)
    for bad in ({"id": "x"}, {"approved": True}, "yes"):
        broken = answered(message, "call-1", state="approval-responded", approval=bad)
        assert chat(owner_client, "c1", user, broken).status_code == 400
    too_long = approval(message, "call-1", False, "x" * 2001)
    assert chat(owner_client, "c1", user, too_long).status_code == 400
    assert models.PendingToolCall.objects.get().state == "pending"


# --- several calls in the step that waits ----------------------------------------------------------------


@pytest.mark.django_db
def test_calls_after_the_waiting_one_are_shown_once_they_run(owner_client, shop, model, decider, resource):
    lookup_call = ToolCall("call-2", "lookup", {"order": "A-1"})
    user, message, chunks = suspend(owner_client, model, "c1", calls(REFUND, lookup_call), "Done.")
    # The lookup runs only after the refund is decided: not shown yet, so useChat's last step is
    # complete once the approval is answered.
    assert [c.get("toolCallId") for c in chunks if c["type"] == "tool-input-available"] == ["call-1"]
    chunks = frames(chat(owner_client, "c1", user, approval(message, "call-1", True)))
    assert [(c["type"], c.get("toolCallId")) for c in chunks[:4]] == [
        ("start", None),
        ("tool-output-available", "call-1"),
        ("tool-input-available", "call-2"),
        ("tool-output-available", "call-2"),
    ]
    assert RUNS == [{"order": "A-1", "amount": 10}, {"lookup": "A-1"}]
    assert [r.role for r in stored("c1")] == ["user", "assistant", "tool", "assistant"]


@pytest.mark.django_db
def test_a_second_waiting_call_suspends_the_continuation_again(owner_client, shop, model, decider, resource):
    second = ToolCall("call-2", "refund", {"order": "B-2", "amount": 5})
    user, message, _ = suspend(owner_client, model, "c1", calls(REFUND, second), "Both refunded.")
    chunks = frames(chat(owner_client, "c1", user, approval(message, "call-1", True)))
    pending = models.PendingToolCall.objects.get(state="pending")
    assert [c["type"] for c in chunks] == [
        "start",
        "tool-output-available",
        "tool-input-available",
        "tool-approval-request",
        "finish",
    ]
    assert chunks[3] == {
        "type": "tool-approval-request",
        "approvalId": str(pending.pk),
        "toolCallId": "call-2",
    }
    assert chunks[-1]["finishReason"] == "tool-calls" and not models.Message.objects.exists()
    message = answered(message, "call-1", state="output-available", output=chunks[1]["output"])
    message["parts"].append({"type": "tool-refund", "toolCallId": "call-2", "state": "input-available"})
    message = answered(
        message, "call-2", state="approval-responded", approval={"id": str(pending.pk), "approved": True}
    )
    chunks = frames(chat(owner_client, "c1", user, message))
    assert chunks[-1]["finishReason"] == "stop"
    assert len(RUNS) == 2 and [r.role for r in stored("c1")] == ["user", "assistant", "tool", "assistant"]


# --- ASGI -------------------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_under_asgi_the_resumed_turn_streams(user, shop, model, decider, resource):
    first, message, _ = suspend(client_for(user), model)
    client = AsyncClient()
    client.force_login(user)
    body = {"id": "c1", "messages": [first, approval(message, "call-1", True)]}

    async def run() -> tuple[Any, list[bytes]]:
        response = await client.post(CHAT, body, content_type="application/json")
        return response, [chunk async for chunk in response.streaming_content]

    try:
        response, raw = async_to_sync(run)()
    finally:
        connections.close_all()
    assert response.status_code == 200 and response.is_async
    text = b"".join(raw).decode()
    chunks = [json.loads(b.removeprefix("data: ")) for b in text.split("\n\n") if b and b != "data: [DONE]"]
    assert chunks[0]["messageId"] == message["id"] and chunks[-1]["finishReason"] == "stop"
    assert [r.role for r in stored("c1")] == ["user", "assistant", "tool", "assistant"]


# --- the client tool's output_schema elsewhere ---------------------------------------------------------


@pytest.mark.django_db
def test_the_result_endpoint_checks_the_output_schema_too(owner_client, shop, model, resource):
    suspend(owner_client, model, "c1", calls(LOCATE), "You are in Lisbon.")
    pending = models.PendingToolCall.objects.get()
    path = API + f"pending/{pending.pk}/result/"
    assert owner_client.post(path, {"result": {"town": "Lisbon"}}, format="json").status_code == 400
    assert models.PendingToolCall.objects.get().state == "pending"
    assert owner_client.post(path, {"result": {"city": "Lisbon"}}, format="json").status_code == 200
    assert models.PendingToolCall.objects.get().state == "done"


def test_a_bad_output_schema_fails_where_the_tool_is_defined():
    with pytest.raises(ConfigurationError, match="output_schema"):
        Tool("t", "d", {"type": "object"}, None, output_schema={"type": 3})


# --- agents and policies ----------------------------------------------------------------------------


@pytest.mark.django_db
def test_an_agent_without_memory_resumes_from_the_chat_too(
    owner_client, make_agent, model, decider, resource
):
    make_agent(id="shop", tools=[refund], memory=None)
    user, message, _ = suspend(owner_client, model)
    chunks = frames(chat(owner_client, "c1", user, approval(message, "call-1", True)))
    assert chunks[0]["messageId"] == message["id"] and chunks[-1]["finishReason"] == "stop"
    assert RUNS == [{"order": "A-1", "amount": 10}] and not models.Message.objects.exists()


@pytest.mark.django_db
def test_under_the_hold_policy_the_call_is_shown_before_its_approval_request(
    owner_client, make_agent, model, decider, resource
):
    make_agent(id="shop", tools=[refund], stream_policy="hold")
    _, message, chunks = suspend(owner_client, model)
    kinds = [c["type"] for c in chunks]
    assert kinds.index("tool-input-available") < kinds.index("tool-approval-request")
    assert message["parts"][-1]["state"] == "approval-requested"


@pytest.mark.django_db
def test_a_client_tool_that_returns_nothing(owner_client, make_agent, model, resource):
    make_agent(id="shop", tools=[Tool("confirm", "Asks the user.", {"type": "object"}, None)])
    user, message, _ = suspend(owner_client, model, "c1", calls(ToolCall("k-1", "confirm", {})), "OK.")
    nothing = answered(message, "k-1", state="output-available")
    assert frames(chat(owner_client, "c1", user, nothing))[-1]["finishReason"] == "stop"
    assert model.requests[-1].messages[-1].tool_results[0].result is None
