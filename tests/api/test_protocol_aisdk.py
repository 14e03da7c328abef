"""`agents/<id>/chat/`: the AI SDK's UI-message stream protocol (v1), frame by frame, under WSGI and
ASGI; edits, regenerations and repeats; errors. (tests/api/test_protocol_aisdk_js.py reads the same
endpoint with the SDK's own client.)"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.db import connections
from django.test import AsyncClient

from memproc import models
from memproc.api.sse import error_data
from memproc.events import StreamEvent
from memproc.exceptions import ModelUnavailableError
from memproc.llm.types import ModelRequest, ModelResponse, ToolCall
from memproc.tools import tool
from tests.api.conftest import API
from tests.factories import MessageFactory

CHAT = API + "agents/api-test/chat/"


def ui(message_id: str, role: str, text: str, *extra: dict[str, Any]) -> dict[str, Any]:
    return {"id": message_id, "role": role, "parts": [{"type": "text", "text": text}, *extra]}


def chat(client: Any, chat_id: str, *messages: dict[str, Any], **body: Any) -> Any:
    payload = {"id": chat_id, "messages": list(messages), "trigger": "submit-message", **body}
    return client.post(CHAT, payload, format="json")


def frames(response: Any) -> list[Any]:
    raw = b"".join(response.streaming_content).decode()
    assert raw.endswith("data: [DONE]\n\n")
    blocks = [b for b in raw.split("\n\n") if b]
    assert all(b.startswith("data: ") and "\n" not in b for b in blocks)
    return [json.loads(b.removeprefix("data: ")) for b in blocks[:-1]]


def stored(thread_id: str) -> list[tuple[str, str, str]]:
    return [
        (m.public_id, m.role, m.text)
        for m in models.Message.objects.filter(thread__public_id=thread_id).order_by("sequence")
    ]


@pytest.mark.django_db
def test_a_turn_is_a_ui_message_stream(owner_client, agent, model, resource):
    model.add("Hi there")
    response = chat(owner_client, "c1", ui("u1", "user", "hello"))
    assert response.status_code == 200
    assert response["x-vercel-ai-ui-message-stream"] == "v1"
    assert response["Content-Type"].startswith("text/event-stream")
    assert response["X-Memproc-Thread-Id"] == "c1"
    chunks = frames(response)
    assert [c["type"] for c in chunks] == [
        "start",
        "start-step",
        "text-start",
        "text-delta",
        "text-delta",
        "text-end",
        "finish-step",
        "finish",
    ]
    start, finish = chunks[0], chunks[-1]
    assert start["messageMetadata"] == {"thread_id": "c1"} and start["messageId"]
    assert "".join(c["delta"] for c in chunks if c["type"] == "text-delta") == "Hi there"
    assert len({c["id"] for c in chunks if c["type"].startswith("text-")}) == 1
    assert finish["finishReason"] == "stop"
    rows = stored("c1")
    assert [(r[1], r[2]) for r in rows] == [("user", "hello"), ("assistant", "Hi there")]
    assert rows[0][0] == "u1"  # the UI message id is the message id
    assert finish["messageMetadata"]["message_ids"] == [r[0] for r in rows]


@pytest.mark.django_db
def test_tool_calls_and_errors_are_tool_parts_in_steps(owner_client, make_agent, model, resource):
    @tool
    def divide(a: int, b: int) -> float:
        """Divides."""
        return a / b

    make_agent(tools=[divide])
    model.add(
        ModelResponse(
            tool_calls=[
                ToolCall(id="c1", name="divide", args={"a": 6, "b": 3}),
                ToolCall(id="c2", name="divide", args={"a": 1, "b": 0}),
            ]
        ),
        "2, and no answer",
    )
    chunks = frames(chat(owner_client, "tools", ui("u1", "user", "divide")))
    assert [c["type"] for c in chunks] == [
        "start",
        "start-step",
        "tool-input-available",
        "tool-input-available",
        "tool-output-available",
        "tool-output-error",
        "finish-step",
        "start-step",
        "text-start",
        *["text-delta"] * 4,
        "text-end",
        "finish-step",
        "finish",
    ]
    assert chunks[2] == {
        "type": "tool-input-available",
        "toolCallId": "c1",
        "toolName": "divide",
        "input": {"a": 6, "b": 3},
    }
    assert chunks[4] == {"type": "tool-output-available", "toolCallId": "c1", "output": 2.0}
    assert chunks[5]["toolCallId"] == "c2" and "division by zero" in chunks[5]["errorText"]


@pytest.mark.django_db
def test_an_input_tripwire_is_a_data_part_then_finish(owner_client, agent, model, resource):
    chunks = frames(chat(owner_client, "blocked", ui("u1", "user", "forbidden words")))
    assert [c["type"] for c in chunks] == ["start", "data-tripwire", "finish"]
    assert chunks[1]["data"]["processor_id"] == "block-word"
    assert chunks[1]["data"]["reason"] == "The word 'forbidden' is not allowed"
    assert chunks[2]["finishReason"] == "content-filter"
    assert model.calls == 0 and not models.Message.objects.exists()


@pytest.mark.django_db
def test_a_stream_tripwire_closes_the_text_then_blocks(owner_client, agent, model, resource):
    model.add("the secret is out")
    chunks = frames(chat(owner_client, "leak", ui("u1", "user", "tell me")))
    assert [c["type"] for c in chunks] == [
        "start",
        "start-step",
        "text-start",
        "text-delta",
        "text-end",
        "data-tripwire",
        "finish-step",
        "finish",
    ]
    assert chunks[5]["data"]["phase"] == "stream" and chunks[-1]["finishReason"] == "content-filter"
    assert not models.Message.objects.exists()


@pytest.mark.django_db
def test_a_retry_is_a_data_part_before_the_new_attempt(owner_client, make_agent, model, resource):
    class RejectDraft:
        id = "reject-draft"

        def process_output_step(self, ctx):
            if "draft" in ctx.messages[-1].text:
                ctx.abort("No drafts", retry=True)

    make_agent(output_processors=[RejectDraft()], max_processor_retries=1)
    model.add("a draft", "the answer")
    chunks = frames(chat(owner_client, "retry", ui("u1", "user", "hi")))
    kinds = [c["type"] for c in chunks]
    at = kinds.index("data-retry")
    assert kinds[at - 1] == "text-end" and chunks[at]["data"]["reason"] == "No drafts"
    after = "".join(c["delta"] for c in chunks[at:] if c["type"] == "text-delta")
    assert after == "the answer" and kinds[-1] == "finish"
    assert stored("retry")[-1][2] == "the answer"


class FailingMidStream:
    id = "test/failing"

    def generate(self, request: ModelRequest) -> ModelResponse:
        raise AssertionError("streams only")

    def stream(self, request: ModelRequest) -> Iterator[StreamEvent]:
        yield StreamEvent(type="text-delta", text="Half")
        raise ModelUnavailableError("connection reset")


@pytest.mark.django_db
def test_an_error_mid_turn_is_an_error_part(owner_client, make_agent, resource):
    make_agent(model=FailingMidStream())
    chunks = frames(chat(owner_client, "broken", ui("u1", "user", "hi")))
    assert [c["type"] for c in chunks][-1] == "error"
    assert chunks[-1]["errorText"] == error_data(ModelUnavailableError("connection reset"))["detail"]
    assert not models.Message.objects.exists()


# --- what a resent chat means ------------------------------------------------------------------------


@pytest.fixture
def answered(thread: Any) -> Any:
    """The owner's thread with one answered turn (u1, a1)."""
    MessageFactory(thread=thread, id="u1", role="user", text="first", sequence=1)
    MessageFactory(thread=thread, id="a1", role="assistant", text="one", sequence=2)
    thread.last_sequence = 2
    thread.save(update_fields=["last_sequence"])
    return thread


@pytest.mark.django_db
def test_the_resent_chat_saves_only_the_new_message(owner_client, agent, model, answered):
    model.add("two")
    response = chat(
        owner_client,
        answered.public_id,
        ui("u1", "user", "first"),
        ui("x-a1", "assistant", "one"),
        ui("u2", "user", "second"),
    )
    assert frames(response)[-1]["type"] == "finish"
    assert [r[0] for r in stored(answered.public_id)][:3] == ["u1", "a1", "u2"]
    assert len(stored(answered.public_id)) == 4
    assert [m.text for m in model.requests[0].messages if m.role == "user"] == ["first", "second"]


@pytest.mark.django_db
def test_regenerate_replaces_the_last_answer(owner_client, agent, model, answered):
    model.add("uno")
    response = chat(owner_client, answered.public_id, ui("u1", "user", "first"), trigger="regenerate-message")
    assert frames(response)[-1]["type"] == "finish"
    rows = stored(answered.public_id)
    assert [(r[0], r[2]) for r in rows][0] == ("u1", "first")
    assert [r[2] for r in rows] == ["first", "uno"] and "a1" not in [r[0] for r in rows]


@pytest.mark.django_db
def test_an_edit_replaces_the_message_and_what_followed(owner_client, agent, model, answered):
    model.add("edited answer")
    response = chat(owner_client, answered.public_id, ui("u1", "user", "first, edited"), messageId="u1")
    assert frames(response)[-1]["type"] == "finish"
    assert [(r[0], r[2]) for r in stored(answered.public_id)][0] == ("u1", "first, edited")
    assert len(stored(answered.public_id)) == 2


@pytest.mark.django_db
def test_a_repeated_message_is_a_400_and_changes_nothing(owner_client, agent, model, answered):
    response = chat(owner_client, answered.public_id, ui("u1", "user", "first"))
    assert response.status_code == 400
    assert "regenerate-message" in json.dumps(response.json())
    assert len(stored(answered.public_id)) == 2 and model.calls == 0


# --- errors before the stream ------------------------------------------------------------------------


@pytest.mark.django_db
def test_errors_before_the_turn_are_json(api_client, owner_client, agent, model, resource, other_thread):
    assert chat(api_client, "c", ui("u", "user", "hi")).status_code == 401
    unknown = owner_client.post(API + "agents/nope/chat/", {"id": "c", "messages": []}, format="json")
    assert unknown.status_code == 404 and unknown.json()["code"] == "not_found"
    foreign = chat(
        owner_client, other_thread.public_id, ui("u", "user", "hi"), resource_id=other_thread.resource_id
    )
    assert foreign.status_code == 404
    for body in (
        {"id": "c", "messages": []},
        {"id": "a/b", "messages": [ui("u", "user", "hi")]},
        {"id": "c", "messages": [{"role": "user", "parts": []}]},
        {"id": "c", "messages": [ui("u", "user", "hi"), ui("a", "assistant", "ho")]},
        {"id": "c", "messages": [ui("u", "user", "hi")], "trigger": "resume-stream"},
    ):
        response = owner_client.post(CHAT, body, format="json")
        assert response.status_code == 400, body
    assert model.calls == 0 and not models.Message.objects.exists()


@pytest.mark.django_db
def test_resuming_finds_no_stream(owner_client, agent):
    assert owner_client.get(API + "agents/api-test/chat/some-chat/stream").status_code == 204


@pytest.mark.django_db
def test_files_and_system_messages_from_the_client(owner_client, agent, model, resource, settings):
    model.add("a red pixel", "ok")
    pixel = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
    file_part = {"type": "file", "mediaType": "image/png", "url": pixel, "filename": "p.png"}
    system = ui("s", "system", "Be brief.")
    frames(chat(owner_client, "files", system, ui("u1", "user", "what is this?", file_part)))
    request = model.requests[-1]
    assert [m.text for m in request.messages if m.role == "system"] == ["You are a test agent."]
    assert [p.media_type for p in request.messages[-1].parts if p.type == "file"] == ["image/png"]
    settings.MEMPROC = {**settings.MEMPROC, "API_ALLOW_SYSTEM_MESSAGES": True}
    frames(chat(owner_client, "files", system, ui("u2", "user", "thanks")))
    assert [m.text for m in model.requests[-1].messages if m.role == "system"][-1] == "Be brief."
    assert "system" not in {r[1] for r in stored("files")}


# --- ASGI --------------------------------------------------------------------------------------------


class SlowStreamingModel:
    id = "test/slow-stream"

    def generate(self, request: ModelRequest) -> ModelResponse:
        return ModelResponse(text="one two")

    async def astream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        for word in ("one ", "two"):
            await asyncio.sleep(0.05)
            yield StreamEvent(type="text-delta", text=word)
        yield StreamEvent(type="finish", usage={}, finish_reason="stop")


@pytest.mark.django_db(transaction=True)
def test_under_asgi_the_chat_stream_is_async(user, make_agent, resource):
    make_agent(model=SlowStreamingModel())
    client = AsyncClient()
    client.force_login(user)

    async def run() -> tuple[Any, list[bytes]]:
        response = await client.post(
            CHAT, {"id": "asgi-chat", "messages": [ui("u1", "user", "hi")]}, content_type="application/json"
        )
        return response, [chunk async for chunk in response.streaming_content]

    try:
        response, raw = async_to_sync(run)()
    finally:
        connections.close_all()
    assert response.status_code == 200 and response.is_async
    assert response["x-vercel-ai-ui-message-stream"] == "v1"
    text = b"".join(raw).decode()
    chunks = [json.loads(b.removeprefix("data: ")) for b in text.split("\n\n") if b and b != "data: [DONE]"]
    assert text.endswith("data: [DONE]\n\n")
    assert "".join(c.get("delta", "") for c in chunks) == "one two"
    assert chunks[-1]["type"] == "finish"
    assert [r[2] for r in stored("asgi-chat")] == ["hi", "one two"]
