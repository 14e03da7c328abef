"""The loopback server refuses conversations the real OpenAI API refuses, so tests catch them."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from memproc.testing.openai_server import OpenAICompatibleServer, Rejection

NOT_A_RESPONSE = "messages with role 'tool' must be a response to a preceeding message with 'tool_calls'"
UNANSWERED = "The following tool_call_ids did not have response messages: "


def client_for(server: OpenAICompatibleServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="test-key", max_retries=0)


def user(text: str = "Weather in Paris?") -> dict[str, Any]:
    return {"role": "user", "content": text}


def calls(*ids: str) -> dict[str, Any]:
    """An assistant message asking for one `get_weather` call per id."""
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": "get_weather", "arguments": "{}"}} for i in ids
        ],
    }


def result(call_id: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": '{"temp": 21}'}


def rejection(server: OpenAICompatibleServer, messages: Any, **options: Any) -> openai.BadRequestError:
    """Sends `messages` through the real SDK and returns the 400 it must raise."""
    with pytest.raises(openai.BadRequestError) as excinfo:
        client_for(server).chat.completions.create(model="m", messages=messages, **options)
    return excinfo.value


def assert_openai_style(error: openai.BadRequestError, message_part: str) -> None:
    """The body has the real API's shape, so code reading `error.param` etc. is exercised too."""
    body = error.response.json()
    assert error.status_code == 400
    assert set(body) == {"error"}
    assert body["error"]["type"] == "invalid_request_error"
    assert body["error"]["param"] == "messages"
    assert body["error"]["code"] is None
    assert message_part in body["error"]["message"]


# --- tool messages that answer nothing --------------------------------------------------------------


@pytest.mark.parametrize(
    "messages",
    [
        pytest.param([user(), result("c1")], id="after-a-user-message"),
        pytest.param([result("c1"), user()], id="first-message"),
        pytest.param([user(), calls("c1"), result("c2")], id="unknown-id"),
        pytest.param(
            [user(), calls("c1"), result("c1"), {"role": "assistant", "content": "21°"}, result("c1")],
            id="answers-an-earlier-assistant-message",
        ),
    ],
)
def test_tool_message_must_answer_the_preceding_tool_calls(server, messages):
    error = rejection(server, messages)

    assert_openai_style(error, f"Invalid parameter: {NOT_A_RESPONSE}.")


# --- tool calls left unanswered ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("messages", "missing"),
    [
        pytest.param([user(), calls("c1"), user("Well?")], "c1", id="followed-by-a-user-message"),
        pytest.param([user(), calls("c1")], "c1", id="last-message"),
        pytest.param([user(), calls("c1", "c2"), result("c1"), user("And?")], "c2", id="one-of-two"),
        pytest.param([user(), calls("c1", "c2", "c3"), result("c2")], "c1, c3", id="two-of-three"),
        pytest.param([user(), calls("c1"), user("Hm"), result("c1")], "c1", id="answer-comes-too-late"),
    ],
)
def test_every_tool_call_must_be_answered_right_after_it(server, messages, missing):
    error = rejection(server, messages)

    assert_openai_style(error, "An assistant message with 'tool_calls' must be followed by tool messages")
    assert error.response.json()["error"]["message"].endswith(UNANSWERED + missing)


def test_unanswered_tool_call_is_refused_when_streaming_too(server):
    error = rejection(server, [user(), calls("c1"), user("Well?")], stream=True)

    assert_openai_style(error, UNANSWERED + "c1")


# --- malformed messages -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("messages", "message_part"),
    [
        pytest.param(openai.omit, "Missing required parameter: 'messages'.", id="missing"),
        pytest.param([], "Invalid 'messages': empty array.", id="empty"),
        pytest.param([{"content": "hi"}], "Missing required parameter: 'messages[0].role'.", id="no-role"),
        pytest.param([{"role": "bot", "content": "hi"}], "Invalid value: 'bot'.", id="unknown-role"),
        pytest.param(["hi"], "Invalid type for 'messages[0]'", id="not-an-object"),
        pytest.param(
            [user(), calls("c1"), {"role": "tool", "content": "21°"}],
            "Missing required parameter: 'messages[2].tool_call_id'.",
            id="tool-without-tool-call-id",
        ),
        pytest.param(
            [user(), {"role": "assistant", "tool_calls": [{"type": "function"}]}],
            "Missing required parameter: 'messages[1].tool_calls[0].id'.",
            id="tool-call-without-id",
        ),
        pytest.param(
            [user(), {"role": "assistant", "tool_calls": []}],
            "Invalid 'messages[1].tool_calls': empty array.",
            id="empty-tool-calls",
        ),
    ],
)
def test_malformed_messages_are_refused(server, messages, message_part):
    error = rejection(server, messages)

    assert_openai_style(error, message_part)


def test_duplicate_call_ids_in_one_assistant_message_are_refused(server):
    error = rejection(server, [user(), calls("c1", "c1"), result("c1")])

    assert_openai_style(error, "Duplicate value for 'id' of 'c1'")


def test_answering_one_call_twice_is_refused(server):
    error = rejection(server, [user(), calls("c1", "c2"), result("c1"), result("c1"), result("c2")])

    assert_openai_style(error, "Duplicate value for 'tool_call_id' of 'c1' in messages[2] and messages[3].")


def test_every_known_role_is_accepted(server):
    messages = [
        {"role": role, "content": "hi"} for role in ("system", "developer", "user", "assistant", "user")
    ]

    client_for(server).chat.completions.create(model="m", messages=messages)

    assert server.rejected == []


# --- valid tool conversations -----------------------------------------------------------------------


def test_tool_call_and_its_result_are_accepted(server):
    server.enqueue({"tool_calls": [{"id": "call_1", "name": "get_weather", "arguments": {"city": "Paris"}}]})
    server.enqueue("It is 21°C in Paris.")
    client = client_for(server)
    messages: list[Any] = [{"role": "system", "content": "Be terse."}, user()]

    first = client.chat.completions.create(model="m", messages=messages).choices[0].message
    messages += [first.model_dump(exclude_none=True), result(first.tool_calls[0].id)]
    second = client.chat.completions.create(model="m", messages=messages).choices[0].message

    assert second.content == "It is 21°C in Paris."
    assert server.rejected == []


def test_parallel_calls_answered_in_any_order_then_more_turns_are_accepted(server):
    messages = [
        user(),
        {**calls("c1", "c2"), "content": "Checking both."},
        result("c2"),
        result("c1"),
        {"role": "assistant", "content": "21° and 18°."},
        user("And tomorrow?"),
        calls("c3"),
        result("c3"),
    ]

    for stream in (False, True):
        response = client_for(server).chat.completions.create(model="m", messages=messages, stream=stream)
        if stream:
            list(response)

    assert server.rejected == []


# --- what gets recorded -----------------------------------------------------------------------------


def test_rejected_requests_are_recorded_with_status_path_error_and_body(server):
    messages = [user(), result("c1")]

    rejection(server, messages)

    [recorded] = server.rejected
    assert isinstance(recorded, Rejection)
    assert (recorded.status, recorded.path) == (400, "/v1/chat/completions")
    assert recorded.error["param"] == "messages"
    assert NOT_A_RESPONSE in recorded.error["message"]
    assert recorded.request["messages"] == messages
    server.reset()
    assert server.rejected == []


def test_a_refused_request_uses_up_no_scripted_reply(server):
    server.enqueue("the scripted answer")

    rejection(server, [user(), calls("c1")])
    answer = client_for(server).chat.completions.create(model="m", messages=[user()])

    assert answer.choices[0].message.content == "the scripted answer"


def test_scripted_errors_are_not_rejections_but_auth_failures_are(server):
    server.enqueue({"status": 400, "message": "Scripted refusal"})

    with pytest.raises(openai.BadRequestError, match="Scripted refusal"):
        client_for(server).chat.completions.create(model="m", messages=[user()])
    assert server.rejected == []

    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=server.base_url, api_key="wrong", max_retries=0).chat.completions.create(
            model="m", messages=[user()]
        )
    assert [r.status for r in server.rejected] == [401]
