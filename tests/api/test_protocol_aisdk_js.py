"""`agents/<id>/chat/` read by the AI SDK's own client code (the `ai` npm package) in Node.

tests/js/aisdk_chat.mjs drives `AbstractChat` (what React's `useChat` wraps) over `DefaultChatTransport`
(which validates every frame with the SDK's UI-message chunk schema) and `readUIMessageStream` against
the live server. `npm ci` installs the locked packages when tests/js/node_modules is missing. Without
Node the test is skipped, except in CI (the `CI` environment variable), where it fails.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memproc import Memory, models
from memproc.api.sse import error_data
from memproc.events import StreamEvent
from memproc.exceptions import ModelUnavailableError
from memproc.llm.types import ModelRequest, ModelResponse, ToolCall
from memproc.tools import tool
from tests.api.conftest import API, BlockWord

JS_DIR = Path(__file__).resolve().parents[1] / "js"

pytestmark = pytest.mark.django_db(transaction=True)


def node_tools() -> tuple[str, str]:
    node, npm = shutil.which("node"), shutil.which("npm")
    if not (node and npm):
        if os.environ.get("CI"):
            pytest.fail("CI is set, but Node.js and npm are not on PATH")
        pytest.skip("needs Node.js and npm")
    if not (JS_DIR / "node_modules" / "ai" / "package.json").exists():
        subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund"], cwd=JS_DIR, check=True, timeout=600, capture_output=True
        )
    return node, npm


class RuleModel:
    """A deterministic model: "add" calls the `add` tool, "fail" breaks off mid-answer, anything else is
    echoed with how many user messages the prompt held (so duplicated history would show) and a call
    number (so a regenerated answer differs)."""

    id = "test/rules"

    def __init__(self) -> None:
        self.calls = 0
        self.lock = threading.Lock()

    def generate(self, request: ModelRequest) -> ModelResponse:
        with self.lock:
            self.calls += 1
            call = self.calls
        last = request.messages[-1]
        if last.role == "tool":
            return ModelResponse(text="The sum is 5.")
        if "add" in last.text:
            return ModelResponse(
                text="Adding.", tool_calls=[ToolCall(id=f"call-{call}", name="add", args={"a": 2, "b": 3})]
            )
        users = sum(1 for m in request.messages if m.role == "user")
        return ModelResponse(text=f"Echo: {last.text} ({users} user messages seen, call {call})")

    def stream(self, request: ModelRequest) -> Iterator[StreamEvent]:
        response = self.generate(request)
        failing = "fail" in request.messages[-1].text
        words = response.text.split(" ") if response.text else []
        for i, word in enumerate(words):
            yield StreamEvent(type="text-delta", text=word if i == 0 else " " + word)
            if failing:
                raise ModelUnavailableError("connection reset")
        for call in response.tool_calls:
            yield StreamEvent(type="tool-call", tool_call=call)
        yield StreamEvent(type="finish", usage={"completion_tokens": len(words)}, finish_reason="stop")


@tool
def add(a: int, b: int) -> int:
    """Adds two numbers."""
    return a + b


def stored(thread_id: str) -> list[Any]:
    return list(models.Message.objects.filter(thread__public_id=thread_id).order_by("sequence"))


def texts(summary: dict[str, Any], role: str) -> list[str]:
    return [
        "".join(p.get("text", "") for p in m["parts"] if p["type"] == "text")
        for m in summary["messages"]
        if m["role"] == role
    ]


def test_the_ai_sdks_chat_client_talks_to_the_chat_endpoint(live_server, make_agent, user, resource):
    from rest_framework.authtoken.models import Token

    node, _ = node_tools()
    make_agent(id="js-agent", model=RuleModel(), tools=[add], input_processors=[BlockWord()], memory=Memory())
    token = Token.objects.create(user=user).key
    url = f"{live_server.url}{API}agents/js-agent/chat/"
    done = subprocess.run(
        [node, "aisdk_chat.mjs", url, f"Bearer {token}"],
        cwd=JS_DIR,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "NO_PROXY": "127.0.0.1,localhost"},
    )
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)

    # Three turns, the whole conversation resent each time: history seen once, nothing saved twice.
    talk = results["conversation"]
    assert (talk["status"], talk["error"]) == ("ready", None)
    assert [m["role"] for m in talk["messages"]] == ["user", "assistant"] * 3
    answers = texts(talk, "assistant")
    assert [a.split(" (")[0] for a in answers] == ["Echo: hello", "Echo: how are you", "Echo: bye"]
    assert [a.split("(")[1].split(" user")[0] for a in answers] == ["1", "2", "3"]
    rows = stored("js-talk")
    assert [r.role for r in rows] == ["user", "assistant"] * 3
    user_ids = [m["id"] for m in talk["messages"] if m["role"] == "user"]
    assert [r.public_id for r in rows if r.role == "user"] == user_ids  # UI message ids kept
    last = talk["messages"][-1]
    assert [p["type"] for p in last["parts"]] == ["step-start", "text"]
    assert last["parts"][1]["state"] == "done"
    assert last["metadata"]["thread_id"] == "js-talk"
    assert last["metadata"]["message_ids"] == [r.public_id for r in rows[-2:]]
    assert {f["finishReason"] for f in talk["finishes"]} == {"stop"}

    # The agent's tool ran on the server; the client saw its input and output, one step per model call.
    parts = results["tools"]["messages"][-1]["parts"]
    assert [p["type"] for p in parts] == ["step-start", "text", "tool-add", "step-start", "text"]
    assert parts[2]["state"] == "output-available"
    assert (parts[2]["input"], parts[2]["output"]) == ({"a": 2, "b": 3}, 5)
    assert (parts[1]["text"], parts[4]["text"]) == ("Adding.", "The sum is 5.")
    assert [r.role for r in stored("js-tools")] == ["user", "assistant", "tool", "assistant"]

    # A tripwire: a data-tripwire part and finish "content-filter"; the blocked input is never saved,
    # not even when useChat resends it with the next message.
    blocked = results["tripwire"]
    notice = blocked["messages"][1]
    assert notice["role"] == "assistant"
    tripwire = next(p for p in notice["parts"] if p["type"] == "data-tripwire")["data"]
    assert (tripwire["processor_id"], tripwire["phase"]) == ("block-word", "input")
    assert blocked["finishes"][0]["finishReason"] == "content-filter"
    assert [(r.role, r.text.split(" (")[0]) for r in stored("js-tripwire")] == [
        ("user", "something else"),
        ("assistant", "Echo: something else"),
    ]
    assert "(1 user messages seen" in stored("js-tripwire")[1].text

    # Regenerate: the last answer is replaced, in the chat and in the thread.
    again = results["regenerate"]
    assert [m["role"] for m in again["messages"]] == ["user", "assistant"] * 2
    rows = stored("js-regenerate")
    assert [r.role for r in rows] == ["user", "assistant"] * 2
    assert rows[-1].text == texts(again, "assistant")[-1]
    assert rows[2].public_id == again["messages"][2]["id"]

    # A failure mid-answer: an error chunk, useChat's error state, nothing saved.
    failing = results["error"]
    assert failing["status"] == "error"
    assert failing["error"] == error_data(ModelUnavailableError("connection reset"))["detail"]
    assert not models.Message.objects.filter(thread__public_id="js-error").exists()

    # readUIMessageStream builds the message from the same stream.
    reader = results["reader"]
    assert reader["snapshots"] >= 3
    assert reader["last"]["role"] == "assistant"
    assert texts({"messages": [reader["last"]]}, "assistant")[0].startswith("Echo: read me")
    assert [r.public_id for r in stored("js-reader")][0] == "reader-user-1"

    assert results["resume"] is None  # 204: no stream to resume
