"""`v1/chat/completions` and `v1/models`: the official `openai` Python client against a live server.

No mocks: the SDK speaks HTTP to `live_server` with a DRF authtoken token as its `api_key`, and the
agent runs its real turn (a scripted model stands in for the provider)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import openai
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
from tests.api.conftest import API, BlockStreamWord, BlockWord

pytestmark = pytest.mark.django_db(transaction=True)

V1 = API + "v1/"


@pytest.fixture
def token(user: Any) -> str:
    from rest_framework.authtoken.models import Token

    return Token.objects.create(user=user).key


@pytest.fixture
def client(live_server: Any, token: str, resource: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{live_server.url}{V1}", api_key=token, max_retries=0, timeout=20)


def stored(thread_id: str) -> list[tuple[str, str]]:
    return [
        (m.role, m.text)
        for m in models.Message.objects.filter(thread__public_id=thread_id).order_by("sequence")
    ]


def user_texts(request: ModelRequest) -> list[str]:
    return [m.text for m in request.messages if m.role == "user"]


class FailingMidStream:
    id = "test/failing"

    def generate(self, request: ModelRequest) -> ModelResponse:
        raise AssertionError("streams only")

    def stream(self, request: ModelRequest) -> Iterator[StreamEvent]:
        yield StreamEvent(type="text-delta", text="Half an ans")
        raise ModelUnavailableError("connection reset")


# --- plain, streamed, tools --------------------------------------------------------------------------


def test_a_plain_completion_answers_and_saves_the_turn(client, agent, model):
    model.add("Hello there!")
    raw = client.chat.completions.with_raw_response.create(
        model="api-test", messages=[{"role": "user", "content": "hi"}]
    )
    completion = raw.parse()
    thread_id = raw.headers["X-Memproc-Thread-Id"]
    assert completion.object == "chat.completion" and completion.model == "api-test"
    choice = completion.choices[0]
    assert (choice.message.role, choice.message.content, choice.finish_reason) == (
        "assistant",
        "Hello there!",
        "stop",
    )
    assert choice.message.refusal is None and not choice.message.tool_calls
    assert completion.metadata == {"thread_id": thread_id}  # not an OpenAI field: the SDK keeps extras
    assert completion.usage.completion_tokens == 2
    assert stored(thread_id) == [("user", "hi"), ("assistant", "Hello there!")]


def test_a_streamed_completion_sends_chunks_usage_and_done(client, agent, model):
    model.add("one two three")
    stream = client.chat.completions.create(
        model="api-test",
        messages=[{"role": "user", "content": "count"}],
        stream=True,
        stream_options={"include_usage": True},
        metadata={"thread_id": "streamed"},
    )
    chunks = list(stream)  # the SDK stops at `data: [DONE]`
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "one two three"
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["stop"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 3
    assert all(c.usage is None for c in chunks[:-1])
    assert stored("streamed") == [("user", "count"), ("assistant", "one two three")]


def test_without_include_usage_no_usage_chunk(client, agent, model):
    model.add("fine")
    chunks = list(
        client.chat.completions.create(
            model="api-test", messages=[{"role": "user", "content": "how?"}], stream=True
        )
    )
    assert chunks[-1].choices[0].finish_reason == "stop" and chunks[-1].usage is None


def test_the_agents_tools_run_on_the_server_and_are_not_returned(client, make_agent, model):
    @tool
    def add(a: int, b: int) -> int:
        """Adds two numbers."""
        return a + b

    make_agent(tools=[add])
    model.add(
        ModelResponse(text="Let me add.", tool_calls=[ToolCall(id="c1", name="add", args={"a": 2, "b": 3})]),
        "It is 5.",
        ModelResponse(tool_calls=[ToolCall(id="c2", name="add", args={"a": 5, "b": 5})]),
        "And that makes 10.",
    )
    completion = client.chat.completions.create(
        model="api-test", messages=[{"role": "user", "content": "2+3?"}], metadata={"thread_id": "tools"}
    )
    message = completion.choices[0].message
    assert message.content == "Let me add.\n\nIt is 5." and not message.tool_calls
    assert completion.choices[0].finish_reason == "stop"
    assert [r for r, _ in stored("tools")] == ["user", "assistant", "tool", "assistant"]

    # Streamed, the steps' texts come a blank line apart, as in `content`; the calls stay server-side.
    conversation = [
        {"role": "user", "content": "2+3?"},
        {"role": "assistant", "content": message.content},
        {"role": "user", "content": "and plus 5?"},
    ]
    chunks = list(
        client.chat.completions.create(
            model="api-test", messages=conversation, stream=True, metadata={"thread_id": "tools"}
        )
    )
    assert all(not c.choices[0].delta.tool_calls for c in chunks if c.choices)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "And that makes 10."
    # The resent conversation (whose tool calls the client never saw) was not saved again.
    assert stored("tools")[4:] == [
        ("user", "and plus 5?"),
        ("assistant", ""),
        ("tool", ""),
        ("assistant", "And that makes 10."),
    ]
    assert len(stored("tools")) == 8


# --- the whole conversation, resent each turn --------------------------------------------------------


def test_resending_the_whole_conversation_saves_only_the_new_messages(client, agent, model):
    model.add("Hi Ada.", "You said your name is Ada.", "Goodbye.")
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "I am Ada"},
    ]
    first = client.chat.completions.with_raw_response.create(model="api-test", messages=messages)
    thread_id = first.headers["X-Memproc-Thread-Id"]
    assert first.headers["X-Memproc-Ignored-System-Messages"] == "1"
    for question in ("Who am I?", "Bye"):
        messages.append(first.parse().choices[0].message.model_dump(exclude_none=True))
        messages.append({"role": "user", "content": question})
        first = client.chat.completions.with_raw_response.create(
            model="api-test", messages=messages, metadata={"thread_id": thread_id}
        )
    assert stored(thread_id) == [
        ("user", "I am Ada"),
        ("assistant", "Hi Ada."),
        ("user", "Who am I?"),
        ("assistant", "You said your name is Ada."),
        ("user", "Bye"),
        ("assistant", "Goodbye."),
    ]
    last = model.requests[-1]
    assert user_texts(last) == ["I am Ada", "Who am I?", "Bye"]  # history once, nothing doubled
    assert [m.text for m in last.messages if m.role == "system"] == ["You are a test agent."]


def test_a_refused_exchange_in_the_resent_conversation_is_never_saved(client, agent, model):
    refused = client.chat.completions.with_raw_response.create(
        model="api-test", messages=[{"role": "user", "content": "say forbidden"}]
    )
    thread_id = refused.headers["X-Memproc-Thread-Id"]
    refusal = refused.parse().choices[0].message
    assert refusal.content is None and "forbidden" in refusal.refusal
    model.add("Sure.")
    client.chat.completions.create(
        model="api-test",
        messages=[
            {"role": "user", "content": "say forbidden"},
            refusal.model_dump(exclude_none=True),
            {"role": "user", "content": "say something nice"},
        ],
        metadata={"thread_id": thread_id},
    )
    assert stored(thread_id) == [("user", "say something nice"), ("assistant", "Sure.")]
    assert user_texts(model.requests[-1]) == ["say something nice"]


def test_system_messages_are_used_when_the_site_allows_them(client, agent, model, settings):
    settings.MEMPROC = {**settings.MEMPROC, "API_ALLOW_SYSTEM_MESSAGES": True}
    model.add("Ahoy.")
    raw = client.chat.completions.with_raw_response.create(
        model="api-test",
        messages=[{"role": "developer", "content": "Talk like a pirate."}, {"role": "user", "content": "hi"}],
    )
    assert "X-Memproc-Ignored-System-Messages" not in raw.headers
    systems = [m.text for m in model.requests[-1].messages if m.role == "system"]
    assert systems == ["You are a test agent.", "Talk like a pirate."]
    assert stored(raw.headers["X-Memproc-Thread-Id"]) == [("user", "hi"), ("assistant", "Ahoy.")]


# --- tripwires ---------------------------------------------------------------------------------------


def test_an_input_tripwire_is_content_filter_with_the_reason_as_refusal(client, agent, model):
    completion = client.chat.completions.create(
        model="api-test", messages=[{"role": "user", "content": "this is forbidden"}]
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "content_filter"
    assert choice.message.content is None
    assert choice.message.refusal == "The word 'forbidden' is not allowed"
    assert completion.memproc["tripwire"]["processor_id"] == "block-word"
    assert model.calls == 0 and not models.Message.objects.exists()
    assert models.TripwireLog.objects.get().phase == "input"


def test_a_streamed_tripwire_ends_with_a_refusal_chunk(client, agent, model):
    model.add("the secret is out")
    chunks = list(
        client.chat.completions.create(
            model="api-test",
            messages=[{"role": "user", "content": "tell me"}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    last_choice = [c for c in chunks if c.choices][-1].choices[0]
    assert last_choice.finish_reason == "content_filter"
    assert last_choice.delta.refusal == "The answer leaked a secret"
    assert chunks[-1].usage is not None
    assert isinstance(chunks[0].choices[0].delta.content, str)
    assert not models.Message.objects.exists()
    assert BlockStreamWord.id == models.TripwireLog.objects.get().processor_id


# --- errors, auth, models ----------------------------------------------------------------------------


def test_an_unknown_agent_is_the_sdks_not_found_error(client, agent):
    with pytest.raises(openai.NotFoundError) as caught:
        client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "hi"}])
    assert caught.value.status_code == 404
    assert caught.value.code == "model_not_found"
    assert caught.value.body["type"] == "invalid_request_error"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("nope")


def test_a_bad_token_is_the_sdks_authentication_error(live_server, agent, resource):
    bad = openai.OpenAI(base_url=f"{live_server.url}{V1}", api_key="not-a-token", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as caught:
        bad.chat.completions.create(model="api-test", messages=[{"role": "user", "content": "hi"}])
    assert caught.value.status_code == 401 and caught.value.code == "invalid_api_key"
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()
    assert not models.Message.objects.exists()


def test_bad_requests_are_the_sdks_bad_request_error(client, agent, model):
    cases = [
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "wizard", "content": "x"}]}, "messages"),
        (
            {
                "messages": [{"role": "user", "content": "x"}],
                "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
            },
            "tools",
        ),
        ({"messages": [{"role": "user", "content": "x"}], "metadata": {"thread_id": "a/b"}}, "metadata"),
        ({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]}, "messages"),
    ]
    for body, param in cases:
        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(model="api-test", **body)
        assert caught.value.status_code == 400
        assert caught.value.body["type"] == "invalid_request_error", body
        assert caught.value.param == param, body
    assert model.calls == 0 and not models.Message.objects.exists()


def test_another_owners_thread_is_not_found(client, agent, other_thread):
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(
            model="api-test",
            messages=[{"role": "user", "content": "hi"}],
            metadata={"thread_id": other_thread.public_id, "resource_id": other_thread.resource_id},
        )


def test_a_provider_failure_is_a_5xx_error(client, agent, model):
    model.add(ModelUnavailableError("no route to host"))
    with pytest.raises(openai.InternalServerError) as caught:
        client.chat.completions.create(model="api-test", messages=[{"role": "user", "content": "hi"}])
    assert caught.value.status_code == 502 and caught.value.body["type"] == "server_error"
    assert error_data(ModelUnavailableError("no route to host"))["detail"] in caught.value.message


def test_an_error_mid_stream_is_raised_by_the_sdk_and_saves_nothing(client, make_agent):
    make_agent(model=FailingMidStream())
    stream = client.chat.completions.create(
        model="api-test", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    received: list[str] = []
    with pytest.raises(openai.APIError) as caught:
        for chunk in stream:
            received.append(chunk.choices[0].delta.content or "")
    assert "".join(received) == "Half an ans"
    assert caught.value.message == error_data(ModelUnavailableError("connection reset"))["detail"]
    assert not models.Message.objects.exists()


def test_models_lists_and_retrieves_the_agents(client, agent):
    listed = [m.id for m in client.models.list()]
    assert "api-test" in listed
    model = client.models.retrieve("api-test")
    assert (model.id, model.object, model.owned_by) == ("api-test", "model", "memproc")


def test_without_authtoken_the_endpoint_still_answers_the_sites_own_auth(
    live_server, agent, model, user, monkeypatch
):
    """A site that does not install authtoken: Basic auth (the demo's DRF setting) works; a Bearer
    header is an AuthenticationError."""
    import base64

    from django.apps import apps

    model.add("Hi.")
    basic = base64.b64encode(f"{user.get_username()}:pw".encode()).decode()
    with_basic = openai.OpenAI(
        base_url=f"{live_server.url}{V1}",
        api_key="unused",
        max_retries=0,
        default_headers={"Authorization": f"Basic {basic}"},
    )
    original = apps.is_installed
    monkeypatch.setattr(
        apps, "is_installed", lambda name: name != "rest_framework.authtoken" and original(name)
    )
    answer = with_basic.chat.completions.create(
        model="api-test", messages=[{"role": "user", "content": "hi"}]
    )
    assert answer.choices[0].message.content == "Hi."
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{live_server.url}{V1}", api_key="x", max_retries=0).models.list()


# --- under ASGI --------------------------------------------------------------------------------------


class SlowStreamingModel:
    id = "test/slow-stream"

    def generate(self, request: ModelRequest) -> ModelResponse:
        return ModelResponse(text="one two")

    async def astream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        for word in ("one ", "two"):
            await asyncio.sleep(0.05)
            yield StreamEvent(type="text-delta", text=word)
        yield StreamEvent(type="finish", usage={"completion_tokens": 2}, finish_reason="stop")


def test_under_asgi_the_stream_is_async_and_generate_answers(user, make_agent, resource, token):
    make_agent(model=SlowStreamingModel(), input_processors=[BlockWord()])
    client = AsyncClient()
    url = V1 + "chat/completions"
    auth = {"Authorization": f"Bearer {token}"}

    async def run() -> tuple[Any, list[bytes], Any]:
        streamed = await client.post(
            url,
            {"model": "api-test", "messages": [{"role": "user", "content": "hi"}], "stream": True},
            content_type="application/json",
            headers=auth,
        )
        frames = [chunk async for chunk in streamed.streaming_content]
        plain = await client.post(
            url,
            {"model": "api-test", "messages": [{"role": "user", "content": "hi again"}]},
            content_type="application/json",
            headers=auth,
        )
        return streamed, frames, plain

    try:
        streamed, frames, plain = async_to_sync(run)()
    finally:
        connections.close_all()
    assert streamed.status_code == 200 and streamed.is_async
    data = [f.decode().removeprefix("data: ").strip() for f in frames]
    assert data[-1] == "[DONE]"
    chunks = [json.loads(d) for d in data[:-1]]
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == "one two"
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert plain.status_code == 200 and plain.json()["choices"][0]["message"]["content"] == "one two"
    thread_id = streamed["X-Memproc-Thread-Id"]
    assert stored(thread_id) == [("user", "hi"), ("assistant", "one two")]
