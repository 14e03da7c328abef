"""Issue 38 item 1, red team: a reply that an output guardrail blocks, through each stream protocol
(memproc's SSE `stream/`, the OpenAI `v1/chat/completions` stream, the AI SDK `chat/` stream), read
as raw bytes from Django's test client one chunk at a time. Under "sentences" and "hold" no byte of
the blocked sentence reaches the client; under "sentences" a clean reply's first sentence arrives
before the model has made its last chunk."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.db import connections
from django.test import AsyncClient

from memproc import models
from tests.api.conftest import API
from tests.pipeline.test_stream_policy import BLOCKED, CLEAN, BlockTerm, RecordingModel

pytestmark = pytest.mark.django_db

# Every word of the blocked sentence ("The vault code is Zanzibar forty two.") that appears nowhere
# else in a stream: not one may be among the bytes received.
BLOCKED_WORDS = (b"vault", b"code", b"Zanzibar", b"forty", b"two")
FIRST_SENTENCE = "Our office is open today. "


SSE_REQUEST = (API + "agents/api-test/stream/", {"messages": "hi"})
OPENAI_REQUEST = (
    API + "v1/chat/completions",
    {"model": "api-test", "messages": [{"role": "user", "content": "hi"}], "stream": True},
)
AISDK_REQUEST = (
    API + "agents/api-test/chat/",
    {
        "id": "chat-1",
        "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}],
        "trigger": "submit-message",
    },
)


def post_sse(client: Any) -> Any:
    return client.post(*SSE_REQUEST, format="json")


def post_openai(client: Any) -> Any:
    return client.post(*OPENAI_REQUEST, format="json")


def post_aisdk(client: Any) -> Any:
    return client.post(*AISDK_REQUEST, format="json")


def sse_deltas(chunk: bytes) -> str:
    text = ""
    for block in chunk.decode().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if fields.get("event") == "text-delta":
            text += json.loads(fields["data"])["text"]
    return text


def data_frames(chunk: bytes) -> list[dict[str, Any]]:
    frames = []
    for block in chunk.decode().split("\n\n"):
        if block.startswith("data: ") and block != "data: [DONE]":
            frames.append(json.loads(block.removeprefix("data: ")))
    return frames


def openai_deltas(chunk: bytes) -> str:
    return "".join(
        choice["delta"].get("content") or "" for frame in data_frames(chunk) for choice in frame["choices"]
    )


def aisdk_deltas(chunk: bytes) -> str:
    return "".join(f["delta"] for f in data_frames(chunk) if f["type"] == "text-delta")


def sse_blocked(raw: bytes) -> bool:
    return b"event: tripwire\n" in raw


def openai_blocked(raw: bytes) -> bool:
    return any(
        choice.get("finish_reason") == "content_filter"
        for frame in data_frames(raw)
        for choice in frame["choices"]
    )


def aisdk_blocked(raw: bytes) -> bool:
    return any(f["type"] == "data-tripwire" for f in data_frames(raw))


PROTOCOLS = {
    "sse": (post_sse, sse_deltas, sse_blocked),
    "openai": (post_openai, openai_deltas, openai_blocked),
    "aisdk": (post_aisdk, aisdk_deltas, aisdk_blocked),
}
ASGI_REQUESTS = {"sse": SSE_REQUEST, "openai": OPENAI_REQUEST, "aisdk": AISDK_REQUEST}

Post = Callable[[Any], Any]


def read(response: Any, log: list[tuple[str, Any]]) -> bytes:
    """The response's raw bytes, read chunk by chunk; each chunk goes into `log` as it arrives."""
    assert response.status_code == 200, response.content
    raw = b""
    for chunk in response.streaming_content:
        log.append(("client", chunk))
        raw += chunk
    return raw


@pytest.fixture
def log() -> list[tuple[str, Any]]:
    return []


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("policy", ["sentences", "hold"])
def test_no_byte_of_the_blocked_sentence_reaches_the_client(
    owner_client, make_agent, resource, log, protocol, policy
):
    post, deltas, blocked = PROTOCOLS[protocol]
    make_agent(model=RecordingModel(log, BLOCKED), output_processors=[BlockTerm()], stream_policy=policy)
    raw = read(post(owner_client), log)
    assert not [word for word in BLOCKED_WORDS if word in raw]
    assert deltas(raw) == (FIRST_SENTENCE if policy == "sentences" else "")
    assert blocked(raw)
    assert not models.Message.objects.exists()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_check_sees_a_leak_under_live(owner_client, make_agent, resource, log, protocol):
    """The same reply under "live" (with the opt-in): the blocked words are in the bytes, so the test
    above would see a leak."""
    post, deltas, blocked = PROTOCOLS[protocol]
    make_agent(
        model=RecordingModel(log, BLOCKED),
        output_processors=[BlockTerm()],
        stream_policy="live",
        allow_unscreened_stream=True,
    )
    raw = read(post(owner_client), log)
    assert b"Zanzibar" in raw and blocked(raw)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_clean_reply_streams_its_first_sentence_before_the_model_has_finished(
    owner_client, make_agent, resource, log, protocol
):
    post, deltas, blocked = PROTOCOLS[protocol]
    make_agent(model=RecordingModel(log, CLEAN), output_processors=[BlockTerm()])  # the default: sentences
    raw = read(post(owner_client), log)
    last_model_chunk = max(i for i, (who, _) in enumerate(log) if who == "model")
    before = "".join(deltas(chunk) for who, chunk in log[:last_model_chunk] if who == "client")
    assert before.startswith("The first sentence is here. ")
    assert deltas(raw) == CLEAN and not blocked(raw)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("policy", ["sentences", "hold"])
def test_under_asgi_no_byte_of_the_blocked_sentence_reaches_the_client(
    user, make_agent, resource, log, protocol, policy
):
    """The same under ASGI, where the turn runs on the event loop and each screening is a step in a
    worker thread."""
    _, deltas, blocked = PROTOCOLS[protocol]
    make_agent(model=RecordingModel(log, BLOCKED), output_processors=[BlockTerm()], stream_policy=policy)
    client = AsyncClient()
    client.force_login(user)
    path, body = ASGI_REQUESTS[protocol]

    async def run() -> tuple[Any, bytes]:
        response = await client.post(path, body, content_type="application/json")
        return response, b"".join([chunk async for chunk in response.streaming_content])

    try:
        response, raw = async_to_sync(run)()
    finally:
        connections.close_all()
    assert response.status_code == 200 and response.is_async
    assert not [word for word in BLOCKED_WORDS if word in raw]
    assert deltas(raw) == (FIRST_SENTENCE if policy == "sentences" else "")
    assert blocked(raw)
