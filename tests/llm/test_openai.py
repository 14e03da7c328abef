"""OpenAIChatModel against a real OpenAI-compatible server on loopback."""

from __future__ import annotations

import sys
import time

import pytest
from django.test import override_settings

from memproc.exceptions import (
    ConfigurationError,
    ModelAuthenticationError,
    ModelRateLimitError,
    ModelResponseError,
    ModelUnavailableError,
)
from memproc.llm import ModelRequest, ToolSpec
from memproc.llm.openai import OpenAIChatModel
from memproc.messages import Message, ToolCallPart, ToolResultPart
from memproc.testing.openai_server import OpenAICompatibleServer

WEATHER = ToolSpec(
    name="get_weather",
    description="The weather in a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


def make_model(server: OpenAICompatibleServer, **options) -> OpenAIChatModel:
    options.setdefault("api_key", "test-key")
    options.setdefault("max_retries", 0)  # error mapping; the retry tests below set their own
    return OpenAIChatModel("test-model", base_url=server.base_url, **options)


def ask(text: str = "Hello there", *, tools: list[ToolSpec] | None = None) -> ModelRequest:
    return ModelRequest(
        messages=[Message.create("system", "You are terse."), Message.create("user", text)], tools=tools or []
    )


def test_generate_returns_the_servers_text_and_usage(server):
    server.enqueue("Hi! How can I help?")

    response = make_model(server).generate(ask())

    assert response.text == "Hi! How can I help?"
    assert response.tool_calls == []
    assert response.finish_reason == "stop"
    assert response.usage == {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10}


def test_generate_echoes_the_last_user_message_when_nothing_is_scripted(server):
    assert make_model(server).generate(ask("What is memproc?")).text == "Echo: What is memproc?"


def test_model_id_names_provider_and_model(server):
    assert make_model(server).id == "openai/test-model"


def test_generate_parses_tool_call_arguments(server):
    server.enqueue({"tool_calls": [{"id": "call_1", "name": "get_weather", "arguments": {"city": "Paris"}}]})

    response = make_model(server).generate(ask("Weather in Paris?", tools=[WEATHER]))

    assert response.finish_reason == "tool_calls"
    assert len(response.tool_calls) == 1
    call = response.tool_calls[0]
    assert (call.id, call.name, call.args) == ("call_1", "get_weather", {"city": "Paris"})


def test_request_has_system_messages_first_and_tools_in_openai_format(server):
    messages = [
        Message.create("user", "Earlier question"),
        Message.create("system", "You are terse."),
        Message.create("assistant", "Earlier answer"),
        Message.create("system", "Working memory: none"),
        Message.create("user", "Now?"),
    ]

    make_model(server).generate(ModelRequest(messages=messages, tools=[WEATHER]))

    body = server.requests[-1]
    assert body["model"] == "test-model"
    assert [(m["role"], m["content"]) for m in body["messages"]] == [
        ("system", "You are terse."),
        ("system", "Working memory: none"),
        ("user", "Earlier question"),
        ("assistant", "Earlier answer"),
        ("user", "Now?"),
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "The weather in a city",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                },
            },
        }
    ]
    assert "stream" not in body


def test_request_without_tools_sends_no_tools_key(server):
    make_model(server).generate(ask())

    assert "tools" not in server.requests[-1]


def test_tool_call_and_result_are_sent_back_in_openai_format(server):
    messages = [
        Message.create("user", "Weather in Paris?"),
        Message.create("assistant", [ToolCallPart("call_1", "get_weather", {"city": "Paris"})]),
        Message.create("tool", [ToolResultPart("call_1", "get_weather", {"temp": 21})]),
    ]

    make_model(server).generate(ModelRequest(messages=messages, tools=[WEATHER]))

    sent = server.requests[-1]["messages"]
    assert sent[1]["tool_calls"] == [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
        }
    ]
    assert sent[2] == {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": 21}'}


def test_extra_body_is_merged_into_the_request(server):
    make_model(server, extra_body={"temperature": 0, "top_k": 5}).generate(ask())

    body = server.requests[-1]
    assert body["temperature"] == 0
    assert body["top_k"] == 5


def test_stream_text_deltas_reassemble_the_full_text(server):
    server.enqueue("The quick brown fox jumps over the lazy dog.")

    events = list(make_model(server).stream(ask()))

    deltas = [e.text for e in events if e.type == "text-delta"]
    assert len(deltas) > 1
    assert "".join(deltas) == "The quick brown fox jumps over the lazy dog."
    assert events[-1].type == "finish"
    assert events[-1].finish_reason == "stop"


def test_stream_asks_for_usage_and_reports_it_on_finish(server):
    server.enqueue("One two three")

    events = list(make_model(server).stream(ask()))

    body = server.requests[-1]
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert events[-1].usage == {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}


def test_stream_assembles_fragmented_tool_call_arguments(server):
    server.enqueue(
        {
            "tool_calls": [
                {"id": "call_a", "name": "get_weather", "arguments": {"city": "Saint-Étienne, France"}},
                {"id": "call_b", "name": "get_weather", "arguments": {"city": "Paris"}},
            ]
        }
    )

    events = list(make_model(server).stream(ask(tools=[WEATHER])))

    calls = [e.tool_call for e in events if e.type == "tool-call"]
    assert [(c.id, c.name, c.args) for c in calls] == [
        ("call_a", "get_weather", {"city": "Saint-Étienne, France"}),
        ("call_b", "get_weather", {"city": "Paris"}),
    ]
    assert [e.type for e in events] == ["tool-call", "tool-call", "finish"]
    assert events[-1].finish_reason == "tool_calls"


def test_stream_with_text_and_tool_call(server):
    server.enqueue(
        {"content": "Let me check.", "tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}]}
    )

    events = list(make_model(server).stream(ask(tools=[WEATHER])))

    assert "".join(e.text for e in events if e.type == "text-delta") == "Let me check."
    assert [e.tool_call.args for e in events if e.type == "tool-call"] == [{"city": "Oslo"}]


def assert_not_chained(error: BaseException) -> None:
    """The SDK's exception (the provider's own text) is not chained for tracebacks to print."""
    assert error.__cause__ is None and error.__suppress_context__


def test_wrong_api_key_raises_authentication_error(server):
    with pytest.raises(ModelAuthenticationError) as excinfo:
        make_model(server, api_key="wrong").generate(ask())

    message = str(excinfo.value)
    assert "401" in message
    assert "Incorrect API key provided" in message
    assert "openai/test-model" in message
    assert_not_chained(excinfo.value)


def test_forbidden_raises_authentication_error(server):
    server.enqueue({"status": 403, "message": "Project lacks access"})

    with pytest.raises(ModelAuthenticationError, match="403.*Project lacks access"):
        make_model(server).generate(ask())


def test_rate_limit_raises_rate_limit_error(server):
    server.enqueue({"status": 429, "message": "Rate limit reached for requests"})

    with pytest.raises(ModelRateLimitError, match="429.*Rate limit reached") as excinfo:
        make_model(server).generate(ask())

    assert_not_chained(excinfo.value)


def test_server_error_raises_unavailable_without_retrying(server):
    server.enqueue({"status": 500, "message": "The server had an error"})

    with pytest.raises(ModelUnavailableError, match="500.*The server had an error"):
        make_model(server).generate(ask())

    assert len(server.requests) == 1  # max_retries=0: one request


def test_server_error_while_streaming_raises_unavailable(server):
    server.enqueue({"status": 503, "message": "Overloaded"})

    with pytest.raises(ModelUnavailableError, match="503.*Overloaded"):
        list(make_model(server).stream(ask()))


def test_connection_dropped_mid_stream_raises_unavailable(server):
    server.enqueue({"content": "This answer will be cut off halfway through", "disconnect_after": 3})

    with pytest.raises(ModelUnavailableError, match="ended before the model finished"):
        list(make_model(server).stream(ask()))


def test_server_stalling_mid_stream_raises_unavailable(server):
    server.enqueue({"content": "slow words here", "chunk_delay": 2})

    started = time.monotonic()
    with pytest.raises(ModelUnavailableError, match="timed out"):
        list(make_model(server, timeout=0.3).stream(ask()))

    assert time.monotonic() - started < 1.5


def test_other_client_errors_raise_response_error(server):
    server.enqueue({"status": 400, "message": "Unknown parameter: foo"})

    with pytest.raises(ModelResponseError, match="400.*Unknown parameter: foo"):
        make_model(server).generate(ask())


def test_timeout_raises_unavailable(server):
    server.delay = 3

    started = time.monotonic()
    with pytest.raises(ModelUnavailableError, match="timed out") as excinfo:
        make_model(server, timeout=0.3).generate(ask())

    assert time.monotonic() - started < 2.5
    assert_not_chained(excinfo.value)


def test_unreachable_server_raises_unavailable():
    with OpenAICompatibleServer() as stopped:
        base_url = stopped.base_url

    with pytest.raises(ModelUnavailableError, match="unreachable"):
        OpenAIChatModel("test-model", base_url=base_url).generate(ask())


def test_tool_call_with_bad_json_arguments_raises_response_error(server):
    server.enqueue({"tool_calls": [{"name": "get_weather", "arguments": '{"city": "Par'}]})

    with pytest.raises(ModelResponseError, match="get_weather.*not valid JSON"):
        make_model(server).generate(ask(tools=[WEATHER]))


def test_streamed_tool_call_with_bad_json_arguments_raises_response_error(server):
    server.enqueue({"tool_calls": [{"name": "get_weather", "arguments": "[1, 2"}]})

    with pytest.raises(ModelResponseError, match="not valid JSON"):
        list(make_model(server).stream(ask(tools=[WEATHER])))


def test_tool_call_arguments_that_are_not_an_object_raise_response_error(server):
    server.enqueue({"tool_calls": [{"name": "get_weather", "arguments": '["Paris"]'}]})

    with pytest.raises(ModelResponseError, match="not a JSON object"):
        make_model(server).generate(ask(tools=[WEATHER]))


# --- configuration ------------------------------------------------------------------------------


def test_local_server_needs_no_api_key():
    with OpenAICompatibleServer() as local:
        response = OpenAIChatModel("llama3.2", base_url=local.base_url).generate(ask("hi"))

    assert response.text == "Echo: hi"


def test_no_api_key_and_no_base_url_is_a_configuration_error():
    with pytest.raises(ConfigurationError, match="no API key.*OPENAI_API_KEY"):
        OpenAIChatModel("gpt-4o-mini").generate(ask())


def test_options_come_from_memproc_models_setting(server):
    model = OpenAIChatModel("test-model")  # built before the settings exist: they are read at call time

    with override_settings(
        MEMPROC={"MODELS": {"openai": {"api_key": "test-key", "base_url": server.base_url}}}
    ):
        assert model.generate(ask("from settings")).text == "Echo: from settings"


def test_settings_timeout_applies(server):
    server.delay = 3
    options = {"api_key": "test-key", "base_url": server.base_url, "timeout": 0.3}

    with override_settings(MEMPROC={"MODELS": {"openai": options}}):
        with pytest.raises(ModelUnavailableError, match="timed out after 0.3s"):
            OpenAIChatModel("test-model").generate(ask())


def test_options_fall_back_to_environment(server, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)

    assert OpenAIChatModel("test-model").generate(ask("env")).text == "Echo: env"


def test_explicit_options_win_over_settings(server):
    with override_settings(
        MEMPROC={"MODELS": {"openai": {"api_key": "wrong", "base_url": "http://127.0.0.1:9/v1"}}}
    ):
        assert make_model(server).generate(ask("explicit")).text == "Echo: explicit"


def test_missing_sdk_is_a_configuration_error_naming_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "openai", None)  # makes `import openai` fail

    with pytest.raises(ConfigurationError, match=r"pip install 'django-memproc\[openai\]'"):
        OpenAIChatModel("gpt-4o-mini", api_key="sk-test").generate(ask())


@pytest.mark.parametrize(
    ("args", "options"),
    [
        (("",), {}),
        (("gpt",), {"timeout": 0}),
        (("gpt",), {"timeout": "60"}),
        (("gpt",), {"base_url": "localhost:11434"}),
        (("gpt",), {"api_key": ""}),
        (("gpt",), {"extra_body": ["temperature"]}),
    ],
)
def test_bad_options_are_rejected_when_built(args, options):
    with pytest.raises(ConfigurationError):
        OpenAIChatModel(*args, **options)
