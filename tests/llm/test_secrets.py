"""Issue 16, item 6 (the adapter's side): the API key lives in a `Secret` that never prints, and a
provider error says what failed in memproc's words (`public_message`), the provider's own text, its
status and the base_url going only to the server log — with the key masked even there."""

from __future__ import annotations

import copy
import logging
import pickle

import pytest
from django.test import override_settings

from memproc.exceptions import (
    EmbedderUnavailable,
    ModelAuthenticationError,
    ModelError,
    ModelRateLimitError,
    ModelResponseError,
    ModelUnavailableError,
)
from memproc.llm import ModelRequest
from memproc.llm.openai import OpenAIChatModel
from memproc.llm.secret import Secret
from memproc.messages import Message
from memproc.testing.openai_server import OpenAICompatibleServer

KEY = "sk-proj-TOPSECRET0123456789"
REQUEST = ModelRequest(messages=[Message.create("user", "hi")])


# --- Secret -----------------------------------------------------------------------------------------


def test_a_secret_never_prints_its_value() -> None:
    secret = Secret(KEY)
    logged = logging.LogRecord(
        "memproc", logging.WARNING, __file__, 1, "key %s", (secret,), None
    ).getMessage()
    for shown in (
        repr(secret),
        str(secret),
        f"{secret}",
        f"{secret!r}",
        f"{secret:>20}",
        logged,
        repr([secret]),
    ):
        assert KEY not in shown and "****" in shown
    assert secret.reveal() == KEY
    assert Secret(secret).reveal() == KEY  # wrapping twice is harmless


def test_secrets_compare_and_hash_by_value() -> None:
    assert Secret(KEY) == Secret(KEY) and hash(Secret(KEY)) == hash(Secret(KEY))
    assert Secret(KEY) != Secret("other") and Secret(KEY) != KEY
    assert bool(Secret(KEY)) and not Secret("")


def test_a_copied_secret_is_still_masked() -> None:
    assert copy.deepcopy(Secret(KEY)).reveal() == KEY
    with pytest.raises(TypeError, match="pickle"):
        pickle.dumps(Secret(KEY))  # a pickle would carry the key in clear to wherever it goes


def test_redact_masks_the_value_inside_a_text() -> None:
    text = f"Incorrect API key provided: {KEY}. Find yours at https://example.com"
    assert (
        Secret(KEY).redact(text) == "Incorrect API key provided: ********. Find yours at https://example.com"
    )
    assert Secret("ab").redact("a cab") == "a cab"  # too short to be worth masking: nothing is


def test_options_repr_does_not_show_the_key() -> None:
    model = OpenAIChatModel("m", api_key=KEY, base_url="http://127.0.0.1:9/v1")
    options = model.options()
    assert KEY not in repr(options) and KEY not in str(options)
    assert options.api_key.reveal() == KEY
    assert KEY not in repr(model) and KEY not in repr(vars(model))


def test_options_from_settings_and_environment_are_secrets(monkeypatch) -> None:
    with override_settings(MEMPROC={"MODELS": {"openai": {"api_key": KEY}}}):
        assert KEY not in repr(OpenAIChatModel("m").options())
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    options = OpenAIChatModel("m").options()
    assert KEY not in repr(options) and options.api_key.reveal() == KEY


def test_the_sdk_client_gets_the_real_key(server: OpenAICompatibleServer) -> None:
    assert OpenAIChatModel("m", api_key="test-key", base_url=server.base_url).generate(REQUEST).text


# --- provider errors --------------------------------------------------------------------------------


def test_public_messages_say_what_failed_in_memprocs_words() -> None:
    assert ModelAuthenticationError("x").public_message == "The model provider rejected the credentials."
    assert ModelUnavailableError("x").public_message == "The model provider is unavailable."
    assert ModelResponseError("x").public_message == "The model provider sent a reply memproc could not read."
    assert ModelRateLimitError("x").public_message.startswith("The model provider is rate limiting")
    assert ModelError("x").public_message == "The model provider failed."
    assert EmbedderUnavailable("x").public_message == "The embedder is unavailable."
    custom = ModelResponseError("details", public_message="The model provider refused the request.")
    assert (str(custom), custom.public_message) == ("details", "The model provider refused the request.")


def test_a_401_that_echoes_the_key_is_logged_masked_and_answered_in_memprocs_words(
    server: OpenAICompatibleServer, caplog: pytest.LogCaptureFixture
) -> None:
    server.enqueue({"status": 401, "message": f"Incorrect API key provided: {KEY}."})
    model = OpenAIChatModel("m", api_key=KEY, base_url=server.base_url, max_retries=0)
    server.api_key = None  # let the request through to the scripted 401

    with (
        caplog.at_level(logging.WARNING, logger="memproc.llm.openai"),
        pytest.raises(ModelAuthenticationError) as caught,
    ):
        model.generate(REQUEST)

    error = caught.value
    assert error.public_message == "The model provider rejected the credentials."
    assert KEY not in str(error) and KEY not in repr(error.args)
    assert "Incorrect API key provided: ********" in str(error)  # details stay for the server side
    (record,) = [r for r in caplog.records if r.name == "memproc.llm.openai"]
    assert record.levelno == logging.WARNING
    logged = record.getMessage()
    assert KEY not in logged
    assert "401" in logged and server.base_url in logged and "Incorrect API key provided" in logged
    assert (record.provider_status, record.base_url) == (401, server.base_url)


@pytest.mark.parametrize(
    "reply, error_class",
    [
        ({"status": 429, "message": "Rate limit reached"}, ModelRateLimitError),
        ({"status": 500, "message": "The server had an error"}, ModelUnavailableError),
        ({"status": 400, "message": "Unknown parameter: foo"}, ModelResponseError),
        ({"status": 404, "message": "The model `m` does not exist"}, ModelResponseError),
    ],
)
def test_status_errors_keep_the_provider_text_out_of_the_public_message(
    server: OpenAICompatibleServer, reply, error_class, caplog
) -> None:
    server.enqueue(reply)
    model = OpenAIChatModel("m", api_key="test-key", base_url=server.base_url, max_retries=0)
    with caplog.at_level(logging.WARNING, logger="memproc.llm.openai"), pytest.raises(error_class) as caught:
        model.generate(REQUEST)
    public = caught.value.public_message
    assert reply["message"] not in public and server.base_url not in public and "127.0.0.1" not in public
    assert reply["message"] in caplog.text and server.base_url in caplog.text


def test_an_unreachable_provider_is_logged_with_its_url() -> None:
    with OpenAICompatibleServer() as stopped:
        base_url = stopped.base_url
    with pytest.raises(ModelUnavailableError) as caught:
        OpenAIChatModel("m", base_url=base_url, max_retries=0).generate(REQUEST)
    assert caught.value.public_message == "The model provider is unavailable."
    assert base_url in str(caught.value)  # the server-side text says where
