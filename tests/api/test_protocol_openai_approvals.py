"""Tool calls that wait, over `v1/chat/completions`, with the official `openai` client against a live
server: a client-side tool is `finish_reason: "tool_calls"` and the client's `tool` message resumes the
turn; an approval-gated call is a "stop" saying what waits, decided at memproc's `pending/<id>/`.

No mocks: the SDK speaks HTTP to `live_server` with a DRF authtoken token, the decisions go to the
REST API with the same kind of token, and a scripted model asks for the tools."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from asgiref.sync import async_to_sync
from django.db import connections
from django.test import AsyncClient

from memproc import Tool, tool
from memproc.llm.types import ModelResponse, ToolCall
from memproc.messages import message_from_content
from memproc.models import Message, PendingToolCall
from tests.api.conftest import API
from tests.factories import ResourceFactory

pytestmark = pytest.mark.django_db(transaction=True)

V1 = API + "v1/"
RUNS: list[str] = []


def the_conversations_user_decides(user: Any, pending: Any) -> bool:
    return str(user.pk) == pending.resource_id


@tool(requires_approval=the_conversations_user_decides)
def delete_file(path: str) -> str:
    """Deletes a file."""
    RUNS.append(path)
    return f"deleted {path}"


LOCATION = Tool(
    "get_location",
    "The user's location, from their browser.",
    {"type": "object", "properties": {"precision": {"type": "string"}}},
    None,
    output_schema={
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
)
LOCATION_FOR_OPENAI = {
    "type": "function",
    "function": {
        "name": "get_location",
        "description": "The user's location.",
        "parameters": {"type": "object", "properties": {"precision": {"type": "string"}}},
    },
}


@pytest.fixture(autouse=True)
def _runs():
    RUNS.clear()


@pytest.fixture
def token(user: Any) -> str:
    from rest_framework.authtoken.models import Token

    return Token.objects.create(user=user).key


@pytest.fixture
def client(live_server: Any, token: str, resource: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{live_server.url}{V1}", api_key=token, max_retries=0, timeout=20)


@pytest.fixture
def rest(live_server: Any, token: str) -> Any:
    """POSTs to memproc's own REST API with the same SDK and token (`OpenAI.post`): the JSON answer;
    an error status raises the SDK's exception for it."""
    sdk = openai.OpenAI(base_url=f"{live_server.url}{API}", api_key=token, max_retries=0, timeout=20)

    def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
        return json.loads(sdk.post(path, cast_to=str, body=body))

    return post


@pytest.fixture
def desk(make_agent):
    return make_agent(id="desk", tools=[delete_file])


@pytest.fixture
def maps(make_agent):
    return make_agent(id="maps", tools=[LOCATION])


def rows(thread_id: str) -> list[tuple[Any, ...]]:
    """The thread's stored messages: role and text, with their tool calls and results."""
    out: list[tuple[Any, ...]] = []
    for row in Message.objects.filter(thread__public_id=thread_id).order_by("sequence"):
        message = message_from_content(id=row.id, role=row.role, content=row.content)
        if message.role == "tool":
            out += [("tool", r.tool_call_id, r.result, r.is_error) for r in message.tool_results]
        elif message.tool_calls:
            calls = [(c.tool_call_id, c.tool_name, dict(c.args)) for c in message.tool_calls]
            out.append((message.role, message.text, calls))
        else:
            out.append((message.role, message.text))
    return out


def calls_delete() -> ModelResponse:
    return ModelResponse(
        text="I will delete it.",
        tool_calls=[ToolCall("call-1", "delete_file", {"path": "a.txt"})],
        finish_reason="tool_calls",
    )


def asks_location() -> ModelResponse:
    return ModelResponse(
        tool_calls=[ToolCall("loc-1", "get_location", {"precision": "city"})], finish_reason="tool_calls"
    )


def stream_parts(chunks: list[Any]) -> tuple[str, list[str], list[Any]]:
    """The streamed content, the finish reasons, and the tool call deltas."""
    choices = [c.choices[0] for c in chunks if c.choices]
    text = "".join(c.delta.content or "" for c in choices)
    finishes = [c.finish_reason for c in choices if c.finish_reason]
    calls = [call for c in choices for call in (c.delta.tool_calls or [])]
    return text, finishes, calls


DELETED_TURN = [
    ("user", "Delete a.txt"),
    ("assistant", "I will delete it.", [("call-1", "delete_file", {"path": "a.txt"})]),
    ("tool", "call-1", "deleted a.txt", False),
    ("assistant", "Deleted a.txt."),
]


# --- an approval-gated tool ---------------------------------------------------------------------------


def test_an_approval_round_trip(client, rest, desk, model):
    model.add(calls_delete(), "Deleted a.txt.", "You're welcome.")
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Delete a.txt"}]
    waiting = client.chat.completions.create(model="desk", messages=messages, metadata={"thread_id": "t1"})
    choice = waiting.choices[0]
    pending = waiting.metadata["pending"]
    assert choice.finish_reason == "stop" and not choice.message.tool_calls
    assert choice.message.content.startswith("I will delete it.\n\n")
    assert "delete_file" in choice.message.content and "waits for approval" in choice.message.content
    assert pending["id"] in choice.message.content
    assert (pending["kind"], pending["tool_name"], pending["tool_call_id"]) == (
        "approval",
        "delete_file",
        "call-1",
    )
    assert pending["args"] == {"path": "a.txt"} and waiting.metadata["thread_id"] == "t1"
    assert waiting.memproc["pending"] == pending
    assert rows("t1") == [] and RUNS == []

    approved = rest(f"pending/{pending['id']}/approve/", {})
    assert approved["text"] == "Deleted a.txt." and approved["pending"] is None
    assert RUNS == ["a.txt"] and rows("t1") == DELETED_TURN

    # The client goes on with the conversation it has (the waiting notice in it): nothing is doubled.
    messages += [choice.message.model_dump(exclude_none=True), {"role": "user", "content": "Thanks"}]
    reply = client.chat.completions.create(model="desk", messages=messages, metadata={"thread_id": "t1"})
    assert reply.choices[0].message.content == "You're welcome."
    assert rows("t1") == [*DELETED_TURN, ("user", "Thanks"), ("assistant", "You're welcome.")]
    prompt = model.requests[-1].messages
    assert [m.role for m in prompt] == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert RUNS == ["a.txt"]


def test_a_streamed_approval_round_trip(client, rest, desk, model):
    model.add(calls_delete(), "Deleted a.txt.")
    chunks = list(
        client.chat.completions.create(
            model="desk",
            messages=[{"role": "user", "content": "Delete a.txt"}],
            metadata={"thread_id": "t1"},
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text, finishes, calls = stream_parts(chunks)
    last = [c for c in chunks if c.choices][-1]
    pending = last.metadata["pending"]
    assert finishes == ["stop"] and calls == []
    assert text.startswith("I will delete it.\n\n") and "waits for approval" in text and pending["id"] in text
    assert pending["kind"] == "approval" and last.memproc["pending"]["id"] == pending["id"]
    assert chunks[-1].usage is not None and rows("t1") == []

    approved = rest(f"pending/{pending['id']}/approve/", {})
    assert approved["text"] == "Deleted a.txt."
    assert rows("t1") == DELETED_TURN and RUNS == ["a.txt"]
    with pytest.raises(openai.ConflictError):
        rest(f"pending/{pending['id']}/approve/", {})
    assert RUNS == ["a.txt"] and rows("t1") == DELETED_TURN


def test_a_message_sent_while_the_call_waits_never_saves_the_waiting_exchange(client, rest, desk, model):
    """The waiting turn saves its own input once decided: the client's copy of it (and the notice) is
    not saved by a turn that comes first, even on a thread that has no message yet."""
    model.add(calls_delete(), "Anything else meanwhile?", "Deleted a.txt.")
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Delete a.txt"}]
    waiting = client.chat.completions.create(model="desk", messages=messages, metadata={"thread_id": "t1"})
    messages += [
        waiting.choices[0].message.model_dump(exclude_none=True),
        {"role": "user", "content": "Still there?"},
    ]
    client.chat.completions.create(model="desk", messages=messages, metadata={"thread_id": "t1"})
    assert rows("t1") == [("user", "Still there?"), ("assistant", "Anything else meanwhile?")]
    assert [m.text for m in model.requests[-1].messages if m.role == "user"] == ["Still there?"]
    rest(f"pending/{waiting.metadata['pending']['id']}/approve/", {})
    assert rows("t1") == [("user", "Still there?"), ("assistant", "Anything else meanwhile?"), *DELETED_TURN]


@pytest.mark.parametrize("stream", [False, True])
def test_a_rejection_round_trip(client, rest, desk, model, stream):
    model.add(calls_delete(), "OK, I left a.txt alone.")
    answer = client.chat.completions.create(
        model="desk",
        messages=[{"role": "user", "content": "Delete a.txt"}],
        metadata={"thread_id": "t1"},
        stream=stream,
    )
    if stream:
        pending = [c for c in answer if c.choices][-1].metadata["pending"]
    else:
        pending = answer.metadata["pending"]
    rejected = rest(f"pending/{pending['id']}/reject/", {"reason": "keep it"})
    assert rejected["text"] == "OK, I left a.txt alone." and RUNS == []
    read = model.requests[-1].messages[-1].tool_results[0]
    assert read.is_error and "rejected" in read.result and "keep it" in read.result
    assert rows("t1") == [
        ("user", "Delete a.txt"),
        ("assistant", "I will delete it.", [("call-1", "delete_file", {"path": "a.txt"})]),
        ("tool", "call-1", "The call was rejected and did not run: keep it", True),
        ("assistant", "OK, I left a.txt alone."),
    ]
    assert PendingToolCall.objects.get().state == "rejected"


# --- a client-side tool -------------------------------------------------------------------------------


LOCATED_TURN = [
    ("user", "Where am I?"),
    ("assistant", "", [("loc-1", "get_location", {"precision": "city"})]),
    ("tool", "loc-1", {"city": "Lisbon"}, False),
    ("assistant", "You are in Lisbon."),
]


def tool_message(content: Any) -> dict[str, Any]:
    text = content if isinstance(content, str) else json.dumps(content)
    return {"role": "tool", "tool_call_id": "loc-1", "content": text}


def test_a_client_tool_round_trip(client, maps, model):
    model.add(asks_location(), "You are in Lisbon.", "Sunny.")
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Where am I?"}]
    asked = client.chat.completions.create(
        model="maps", messages=messages, tools=[LOCATION_FOR_OPENAI], metadata={"thread_id": "t1"}
    )
    choice = asked.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert (call.id, call.type, call.function.name) == ("loc-1", "function", "get_location")
    assert json.loads(call.function.arguments) == {"precision": "city"}
    assert asked.metadata["pending"]["kind"] == "client"
    assert asked.metadata["pending"]["tool_call_id"] == "loc-1"
    assert rows("t1") == []

    messages += [choice.message.model_dump(exclude_none=True), tool_message({"city": "Lisbon"})]
    answered = client.chat.completions.create(
        model="maps", messages=messages, tools=[LOCATION_FOR_OPENAI], metadata={"thread_id": "t1"}
    )
    assert answered.choices[0].message.content == "You are in Lisbon."
    assert answered.choices[0].finish_reason == "stop" and not answered.choices[0].message.tool_calls
    assert answered.metadata == {"thread_id": "t1"}
    assert model.requests[1].messages[-1].tool_results[0].result == {"city": "Lisbon"}
    assert rows("t1") == LOCATED_TURN
    assert PendingToolCall.objects.get().state == "done"

    # The next turn resends it all (the call, the result, the answer): only the new message is saved.
    messages += [
        answered.choices[0].message.model_dump(exclude_none=True),
        {"role": "user", "content": "And the weather?"},
    ]
    client.chat.completions.create(
        model="maps", messages=messages, tools=[LOCATION_FOR_OPENAI], metadata={"thread_id": "t1"}
    )
    assert rows("t1") == [*LOCATED_TURN, ("user", "And the weather?"), ("assistant", "Sunny.")]


def test_a_streamed_client_tool_round_trip(client, maps, model):
    model.add(
        ModelResponse(
            text="Let me look.",
            tool_calls=[ToolCall("loc-1", "get_location", {"precision": "city"})],
            finish_reason="tool_calls",
        ),
        "You are in Lisbon.",
    )
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Where am I?"}]
    chunks = list(
        client.chat.completions.create(
            model="maps",
            messages=messages,
            tools=[LOCATION_FOR_OPENAI],
            metadata={"thread_id": "t1"},
            stream=True,
        )
    )
    text, finishes, calls = stream_parts(chunks)
    assert (text, finishes) == ("Let me look.", ["tool_calls"])
    (call,) = calls
    assert (call.index, call.id, call.function.name) == (0, "loc-1", "get_location")
    assert [c for c in chunks if c.choices][-1].metadata["pending"]["kind"] == "client"
    assert rows("t1") == []

    assistant = {
        "role": "assistant",
        "content": text,
        "tool_calls": [
            {"id": call.id, "type": "function", "function": call.function.model_dump(exclude_none=True)}
        ],
    }
    messages += [assistant, tool_message({"city": "Lisbon"})]
    chunks = list(
        client.chat.completions.create(
            model="maps",
            messages=messages,
            tools=[LOCATION_FOR_OPENAI],
            metadata={"thread_id": "t1"},
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text, finishes, calls = stream_parts(chunks)
    assert (text, finishes, calls) == ("You are in Lisbon.", ["stop"], [])  # not the first step's text again
    assert chunks[0].choices[0].delta.role == "assistant" and chunks[-1].usage is not None
    assert rows("t1") == [
        ("user", "Where am I?"),
        ("assistant", "Let me look.", [("loc-1", "get_location", {"precision": "city"})]),
        ("tool", "loc-1", {"city": "Lisbon"}, False),
        ("assistant", "You are in Lisbon."),
    ]


@pytest.mark.parametrize("stream", [False, True])
def test_a_model_that_asks_again_gets_tool_calls_again_and_the_turn_saves_once(client, maps, model, stream):
    again = ModelResponse(
        tool_calls=[ToolCall("loc-2", "get_location", {"precision": "street"})], finish_reason="tool_calls"
    )
    first = ModelResponse(
        text="Let me look.",
        tool_calls=[ToolCall("loc-1", "get_location", {"precision": "city"})],
        finish_reason="tool_calls",
    )
    model.add(first, again, "Rua Augusta, Lisbon.")
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Where am I?"}]
    for call_id, result in (("loc-1", {"city": "Lisbon"}), ("loc-2", {"city": "Lisbon, Rua Augusta"})):
        reply = client.chat.completions.create(model="maps", messages=messages, metadata={"thread_id": "t1"})
        message = reply.choices[0].message
        assert reply.choices[0].finish_reason == "tool_calls" and message.tool_calls[0].id == call_id
        assert message.content == ("Let me look." if call_id == "loc-1" else None)  # said once
        messages += [
            message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call_id, "content": json.dumps(result)},
        ]
    answer = client.chat.completions.create(
        model="maps", messages=messages, metadata={"thread_id": "t1"}, stream=stream
    )
    text = stream_parts(list(answer))[0] if stream else answer.choices[0].message.content
    assert text == "Rua Augusta, Lisbon."
    assert rows("t1") == [
        ("user", "Where am I?"),
        ("assistant", "Let me look.", [("loc-1", "get_location", {"precision": "city"})]),
        ("tool", "loc-1", {"city": "Lisbon"}, False),
        ("assistant", "", [("loc-2", "get_location", {"precision": "street"})]),
        ("tool", "loc-2", {"city": "Lisbon, Rua Augusta"}, False),
        ("assistant", "Rua Augusta, Lisbon."),
    ]
    assert sorted(PendingToolCall.objects.values_list("tool_call_id", "state")) == [
        ("loc-1", "done"),
        ("loc-2", "done"),
    ]


def test_an_agent_without_memory_takes_the_answer_without_a_thread(client, make_agent, model):
    make_agent(id="maps", tools=[LOCATION], memory=None)
    model.add(asks_location(), "You are in Lisbon.")
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Where am I?"}]
    asked = client.chat.completions.create(model="maps", messages=messages)
    assert asked.choices[0].finish_reason == "tool_calls" and asked.metadata["thread_id"] is None
    messages += [asked.choices[0].message.model_dump(exclude_none=True), tool_message({"city": "Lisbon"})]
    answered = client.chat.completions.create(model="maps", messages=messages)
    assert answered.choices[0].message.content == "You are in Lisbon."
    assert model.requests[1].messages[-1].tool_results[0].result == {"city": "Lisbon"}
    assert PendingToolCall.objects.get().state == "done" and not Message.objects.exists()


@pytest.mark.parametrize("content", ["Lisbon, Portugal", "NaN", '{"city": Infinity}'])
def test_a_tool_result_is_plain_text_when_it_is_not_json(client, make_agent, model, content):
    free_text = Tool("get_location", "The user's location.", {"type": "object", "properties": {}}, None)
    make_agent(id="maps", tools=[free_text])
    model.add(asks_location(), "Lisbon, then.")
    messages = [{"role": "user", "content": "Where am I?"}]
    asked = client.chat.completions.create(model="maps", messages=messages, metadata={"thread_id": "t1"})
    messages += [asked.choices[0].message.model_dump(exclude_none=True), tool_message(content)]
    client.chat.completions.create(model="maps", messages=messages, metadata={"thread_id": "t1"})
    assert rows("t1")[2] == ("tool", "loc-1", content, False)


# --- failures -----------------------------------------------------------------------------------------


def suspend_on_location(client: openai.OpenAI, model: Any, thread_id: str = "t1") -> list[dict[str, Any]]:
    """The conversation up to the model's call of the client-side tool (the turn waits)."""
    model.add(asks_location(), "You are in Lisbon.")
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Where am I?"}]
    asked = client.chat.completions.create(model="maps", messages=messages, metadata={"thread_id": thread_id})
    return [*messages, asked.choices[0].message.model_dump(exclude_none=True)]


@pytest.mark.parametrize("content", [{"town": "Lisbon"}, {"city": 7}, "Lisbon"])
def test_a_result_that_breaks_the_tools_schema_is_a_400_and_the_call_still_waits(
    client, maps, model, content
):
    messages = suspend_on_location(client, model)
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model="maps", messages=[*messages, tool_message(content)], metadata={"thread_id": "t1"}
        )
    assert caught.value.status_code == 400 and caught.value.body["type"] == "invalid_request_error"
    assert "get_location" in caught.value.message
    assert PendingToolCall.objects.get().state == "pending" and rows("t1") == [] and model.calls == 1

    answered = client.chat.completions.create(
        model="maps", messages=[*messages, tool_message({"city": "Lisbon"})], metadata={"thread_id": "t1"}
    )
    assert answered.choices[0].message.content == "You are in Lisbon." and rows("t1") == LOCATED_TURN


def test_a_result_that_cannot_be_stored_is_a_400_never_a_500(client, make_agent, model):
    make_agent(id="maps", tools=[Tool("get_location", "", {"type": "object", "properties": {}}, None)])
    messages = suspend_on_location(client, model)
    for content in ("Lis\u0000bon", {"city": "Lis\u0000bon"}):
        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(
                model="maps", messages=[*messages, tool_message(content)], metadata={"thread_id": "t1"}
            )
        assert caught.value.param == "messages"
    assert PendingToolCall.objects.get().state == "pending" and rows("t1") == []


def test_a_tool_message_without_the_assistant_message_holding_its_call_is_a_400(client, maps, model):
    messages = suspend_on_location(client, model)
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model="maps",
            messages=[messages[0], tool_message({"city": "Lisbon"})],
            metadata={"thread_id": "t1"},
        )
    assert caught.value.param == "messages"
    assert PendingToolCall.objects.get().state == "pending" and rows("t1") == []


@pytest.mark.parametrize("stream", [False, True])
def test_a_tool_message_for_a_call_no_longer_pending_is_a_409(client, maps, model, stream):
    messages = [*suspend_on_location(client, model), tool_message({"city": "Lisbon"})]
    client.chat.completions.create(model="maps", messages=messages, metadata={"thread_id": "t1"})
    with pytest.raises(openai.ConflictError) as caught:
        client.chat.completions.create(
            model="maps", messages=messages, metadata={"thread_id": "t1"}, stream=stream
        )
    assert caught.value.status_code == 409 and caught.value.body["type"] == "conflict_error"
    assert rows("t1") == LOCATED_TURN and model.calls == 2


def test_another_users_thread_is_not_found_and_its_call_still_waits(client, maps, model, other_user, user):
    model.add(asks_location())
    theirs = ResourceFactory(id=str(other_user.pk))
    maps.generate("Where am I?", thread_id="theirs", resource_id=theirs.id)
    conversation = [
        {"role": "user", "content": "Where am I?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "loc-1",
                    "type": "function",
                    "function": {"name": "get_location", "arguments": '{"precision": "city"}'},
                }
            ],
        },
        tool_message({"city": "Lisbon"}),
    ]
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(
            model="maps",
            messages=conversation,
            metadata={"thread_id": "theirs", "resource_id": theirs.id},
        )
    assert PendingToolCall.objects.get().state == "pending" and model.calls == 1
    assert not Message.objects.exists()

    # Named by its id alone, the thread is the caller's own (a new one): their call is not touched.
    model.add("An imported conversation.")
    client.chat.completions.create(model="maps", messages=conversation, metadata={"thread_id": "theirs"})
    assert PendingToolCall.objects.get().state == "pending"
    assert Message.objects.filter(thread__resource_id=theirs.id).count() == 0
    assert Message.objects.filter(thread__resource_id=str(user.pk)).count() == 4


@pytest.mark.parametrize(
    "tools",
    [
        [{"type": "function", "function": {"name": "launch_rockets", "parameters": {"type": "object"}}}],
        [LOCATION_FOR_OPENAI, {"type": "function", "function": {"name": "delete_file"}}],
        [{"type": "function", "function": {"name": "delete_file"}}],
        [{"type": "web_search"}],
        ["get_location"],
    ],
)
def test_tools_the_agent_does_not_answer_on_the_client_are_a_400(client, maps, desk, model, tools):
    for agent in ("maps", "desk"):
        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(
                model=agent, messages=[{"role": "user", "content": "hi"}], tools=tools
            )
        assert caught.value.status_code == 400 and caught.value.param == "tools"
    assert model.calls == 0 and not Message.objects.exists()


# --- under ASGI ---------------------------------------------------------------------------------------


def test_under_asgi_the_answer_resumes_the_turn_and_streams_asynchronously(
    user, maps, model, resource, token
):
    model.add(asks_location(), "You are in Lisbon.")
    client = AsyncClient()
    url = V1 + "chat/completions"
    auth = {"Authorization": f"Bearer {token}"}
    question = [{"role": "user", "content": "Where am I?"}]

    async def run() -> tuple[Any, Any, list[bytes]]:
        asked = await client.post(
            url,
            {"model": "maps", "messages": question, "metadata": {"thread_id": "t1"}},
            content_type="application/json",
            headers=auth,
        )
        message = asked.json()["choices"][0]["message"]
        answer = [*question, message, tool_message({"city": "Lisbon"})]
        streamed = await client.post(
            url,
            {"model": "maps", "messages": answer, "metadata": {"thread_id": "t1"}, "stream": True},
            content_type="application/json",
            headers=auth,
        )
        return asked, streamed, [chunk async for chunk in streamed.streaming_content]

    try:
        asked, streamed, frames = async_to_sync(run)()
    finally:
        connections.close_all()
    assert asked.json()["choices"][0]["finish_reason"] == "tool_calls"
    assert streamed.status_code == 200 and streamed.is_async
    data = [f.decode().removeprefix("data: ").strip() for f in frames]
    assert data[-1] == "[DONE]"
    chunks = [json.loads(d) for d in data[:-1]]
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == "You are in Lisbon."
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert rows("t1") == LOCATED_TURN
