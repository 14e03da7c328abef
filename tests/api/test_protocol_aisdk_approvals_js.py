"""Tool calls that wait, through `agents/<id>/chat/`, read and answered by the AI SDK's own client code.

tests/js/aisdk_approvals.mjs drives `AbstractChat` (what React's `useChat` wraps) over
`DefaultChatTransport` against the live server: an approval-gated call approved and one rejected with
`addToolApprovalResponse`, a client-side tool answered with `addToolOutput`, each sent back by
`sendAutomaticallyWhen`. Without Node the test is skipped, except in CI (see test_protocol_aisdk_js).
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from typing import Any

import pytest
from django.contrib.auth.models import Permission

from memproc import Memory, Tool, models, tool
from memproc.llm.types import ModelRequest, ModelResponse, ToolCall
from tests.api.conftest import API
from tests.api.test_protocol_aisdk_js import JS_DIR, node_tools

pytestmark = pytest.mark.django_db(transaction=True)

RUNS: list[dict[str, Any]] = []


@tool(requires_approval=True)
def refund(order: str) -> str:
    """Refunds an order."""
    RUNS.append({"order": order})
    return f"refunded {order}"


LOCATION = Tool(
    "get_location",
    "The user's location, from their browser.",
    {"type": "object", "properties": {}},
    None,
    output_schema={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


class ShopModel:
    """ "refund X" calls the gated refund tool, "where" the client-side location tool; a tool result is
    answered from what it says; anything else is echoed with how many user messages the prompt held."""

    id = "test/shop"

    def __init__(self) -> None:
        self.calls = 0
        self.lock = threading.Lock()

    def generate(self, request: ModelRequest) -> ModelResponse:
        with self.lock:
            self.calls += 1
            call = self.calls
        last = request.messages[-1]
        if last.role == "tool":
            result = last.tool_results[0]
            if result.tool_name == "get_location":
                return ModelResponse(text=f"You are in {result.result['city']}.")
            return ModelResponse(text=f"Not refunded: {result.result}" if result.is_error else "Refunded.")
        text = last.text
        if "refund" in text:
            order = text.rsplit(" ", 1)[-1]
            return ModelResponse(
                text=f"I will refund {order}.",
                tool_calls=[ToolCall(f"call-{call}", "refund", {"order": order})],
                finish_reason="tool_calls",
            )
        if "where" in text:
            return ModelResponse(
                tool_calls=[ToolCall(f"loc-{call}", "get_location", {})], finish_reason="tool_calls"
            )
        users = sum(1 for m in request.messages if m.role == "user")
        return ModelResponse(text=f"Echo: {text} ({users} user messages seen)")


def rows(thread_id: str) -> list[Any]:
    return list(models.Message.objects.filter(thread__public_id=thread_id).order_by("sequence"))


def tool_part(message: dict[str, Any]) -> dict[str, Any]:
    return next(p for p in message["parts"] if p["type"].startswith("tool-"))


def test_useChat_approves_rejects_and_answers_client_tools(live_server, make_agent, user, resource):
    from rest_framework.authtoken.models import Token

    node, _ = node_tools()
    RUNS.clear()
    make_agent(id="js-shop", model=ShopModel(), tools=[refund, LOCATION], memory=Memory())
    user.user_permissions.add(Permission.objects.get(codename="change_pendingtoolcall"))
    token = Token.objects.create(user=user).key
    done = subprocess.run(
        [node, "aisdk_approvals.mjs", f"{live_server.url}{API}agents/js-shop/chat/", f"Bearer {token}"],
        cwd=JS_DIR,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "NO_PROXY": "127.0.0.1,localhost"},
    )
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)

    # The turn waits: an approval request in the assistant message, finish "tool-calls", nothing saved.
    waiting = results["approveRequested"]
    assert (waiting["status"], waiting["error"]) == ("ready", None)
    assert waiting["finishes"][0]["finishReason"] == "tool-calls"
    asked = waiting["messages"][-1]
    part = tool_part(asked)
    pending = models.PendingToolCall.objects.get(thread_id="js-approve")
    assert (part["type"], part["state"]) == ("tool-refund", "approval-requested")
    assert part["approval"]["id"] == asked["metadata"]["pending"]["id"] == str(pending.pk)

    # Approved: the resumed turn continued the same message; the tool ran once; one turn saved.
    approved = results["approved"]
    assert [m["role"] for m in approved["messages"]] == ["user", "assistant"]
    message = approved["messages"][-1]
    assert message["id"] == asked["id"] and message["metadata"]["pending"] is None
    assert [p["type"] for p in message["parts"]] == [
        "step-start",
        "text",
        "tool-refund",
        "step-start",
        "text",
    ]
    part = tool_part(message)
    assert (part["state"], part["output"], part["approval"]["approved"]) == (
        "output-available",
        "refunded A-1",
        True,
    )
    assert message["parts"][-1]["text"] == "Refunded."
    assert [f["finishReason"] for f in approved["finishes"]] == ["tool-calls", "stop"]
    pending.refresh_from_db()
    assert (pending.state, pending.decided_by_id) == ("done", user.pk)

    # The next message saves only itself: the history the model saw holds the turn once.
    talk = results["approve"]
    assert (talk["status"], talk["error"]) == ("ready", None)
    assert [m["role"] for m in talk["messages"]] == ["user", "assistant"] * 2
    last = "".join(p.get("text", "") for p in talk["messages"][-1]["parts"])
    assert last == "Echo: thanks (2 user messages seen)"
    assert [r.role for r in rows("js-approve")] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
        "assistant",
    ]
    assert RUNS[0] == {"order": "A-1"}

    # Rejected with a reason: the part is output-denied, the tool never ran, the model read why.
    rejected = results["reject"]
    assert (rejected["status"], rejected["error"]) == ("ready", None)
    assert [m["role"] for m in rejected["messages"]] == ["user", "assistant"]
    part = tool_part(rejected["messages"][-1])
    assert (part["state"], part["approval"]["approved"], part["approval"]["reason"]) == (
        "output-denied",
        False,
        "too much",
    )
    reply = rejected["messages"][-1]["parts"][-1]["text"]
    assert reply == "Not refunded: The call was rejected and did not run: too much"
    assert RUNS == [{"order": "A-1"}]
    saved = rows("js-reject")
    assert [r.role for r in saved] == ["user", "assistant", "tool", "assistant"]
    result = saved[2].content["parts"][0]
    assert result["is_error"] and result["result"] == "The call was rejected and did not run: too much"

    # A client-side tool: onToolCall fired, addToolOutput's answer resumed the turn in the same message.
    located = results["client"]
    assert (located["status"], located["error"]) == ("ready", None)
    assert [c["toolName"] for c in located["toolCalls"]] == ["get_location"]
    assert [m["role"] for m in located["messages"]] == ["user", "assistant"]
    message = located["messages"][-1]
    part = tool_part(message)
    assert (part["type"], part["state"], part["output"]) == (
        "tool-get_location",
        "output-available",
        {"city": "Lisbon"},
    )
    assert message["parts"][-1]["text"] == "You are in Lisbon."
    assert [f["finishReason"] for f in located["finishes"]] == ["tool-calls", "stop"]
    assert [r.role for r in rows("js-client")] == ["user", "assistant", "tool", "assistant"]
    assert models.PendingToolCall.objects.get(thread_id="js-client").state == "done"
