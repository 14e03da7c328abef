"""resolve_model: "provider/model" strings, model objects, the default, and settings changes."""

from __future__ import annotations

import pytest
from django.test import override_settings

from memproc.exceptions import ConfigurationError
from memproc.llm import ModelRequest, ModelResponse, resolve_model
from memproc.llm.local import EchoModel
from memproc.llm.openai import OpenAIChatModel
from memproc.llm.registry import register_provider, registered_providers, unregister_provider
from memproc.messages import Message


class FixedModel:
    id = "fixed/model"

    def __init__(self, name: str = "model") -> None:
        self.name = name

    def generate(self, request: ModelRequest) -> ModelResponse:
        return ModelResponse(text=f"fixed:{self.name}")


def test_none_resolves_to_the_default_local_echo_model():
    model = resolve_model(None)

    assert isinstance(model, EchoModel)
    assert model.id == "local/echo"


def test_default_model_follows_settings(server):
    config = {"DEFAULT_MODEL": "openai/test-model", "MODELS": {"openai": {"base_url": server.base_url}}}

    with override_settings(MEMPROC=config):
        model = resolve_model(None)

    assert isinstance(model, OpenAIChatModel)
    assert model.id == "openai/test-model"


def test_an_object_with_generate_is_returned_as_is():
    model = FixedModel()

    assert resolve_model(model) is model


def test_local_echo_resolves_and_is_cached():
    assert isinstance(resolve_model("local/echo"), EchoModel)
    assert resolve_model("local/echo") is resolve_model("local/echo")


def test_openai_spec_builds_an_openai_model():
    with override_settings(MEMPROC={"MODELS": {"openai": {"api_key": "sk-test"}}}):
        model = resolve_model("openai/gpt-4o-mini")

    assert isinstance(model, OpenAIChatModel)
    assert model.id == "openai/gpt-4o-mini"
    assert model.model == "gpt-4o-mini"


def test_model_names_may_contain_slashes():
    with override_settings(MEMPROC={"MODELS": {"openai": {"api_key": "sk-test"}}}):
        model = resolve_model("openai/meta-llama/llama-3.1-8b-instruct")

    assert model.model == "meta-llama/llama-3.1-8b-instruct"


def test_openai_without_key_or_base_url_fails_at_resolve_time():
    with pytest.raises(ConfigurationError, match="no API key"):
        resolve_model("openai/gpt-4o-mini")


def test_unknown_provider_is_a_configuration_error_listing_known_ones():
    with pytest.raises(ConfigurationError, match=r"Unknown model provider 'anthropic'.*local, openai"):
        resolve_model("anthropic/claude")


def test_unknown_local_model_is_a_configuration_error():
    with pytest.raises(ConfigurationError, match="local/echo"):
        resolve_model("local/parrot")


@pytest.mark.parametrize("spec", ["gpt-4o-mini", "/gpt-4o", "openai/", "openai//", "", "  "])
def test_malformed_spec_is_a_configuration_error(spec):
    with pytest.raises(ConfigurationError, match="provider/model"):
        resolve_model(spec)


def test_something_that_is_not_a_model_is_a_configuration_error():
    with pytest.raises(ConfigurationError, match="generate"):
        resolve_model(42)  # type: ignore[arg-type]


def test_cache_is_reset_when_memproc_settings_change(server):
    with override_settings(MEMPROC={"MODELS": {"openai": {"api_key": "sk-a"}}}):
        first = resolve_model("openai/test-model")
    with override_settings(
        MEMPROC={"MODELS": {"openai": {"api_key": "test-key", "base_url": server.base_url}}}
    ):
        second = resolve_model("openai/test-model")
        assert second is not first
        assert second.generate(ModelRequest(messages=[Message.create("user", "hi")])).text == "Echo: hi"


def test_settings_can_declare_openai_compatible_providers(server):
    config = {"MODELS": {"ollama": {"api": "openai", "base_url": server.base_url, "api_key": "test-key"}}}

    with override_settings(MEMPROC=config):
        model = resolve_model("ollama/llama3.2")
        response = model.generate(ModelRequest(messages=[Message.create("user", "local")]))

    assert model.id == "ollama/llama3.2"
    assert response.text == "Echo: local"
    assert server.requests[-1]["model"] == "llama3.2"


def test_register_provider_adds_a_provider():
    register_provider("fixed", FixedModel)
    try:
        model = resolve_model("fixed/alpha")
        assert "fixed" in registered_providers()
        assert model.generate(ModelRequest(messages=[])).text == "fixed:alpha"
    finally:
        unregister_provider("fixed")

    with pytest.raises(ConfigurationError, match="Unknown model provider 'fixed'"):
        resolve_model("fixed/alpha")


def test_registering_a_provider_twice_needs_replace():
    register_provider("fixed", FixedModel)
    try:
        with pytest.raises(ConfigurationError, match="already registered"):
            register_provider("fixed", lambda name: FixedModel("other"))
        register_provider("fixed", lambda name: FixedModel("other"), replace=True)
        assert resolve_model("fixed/x").generate(ModelRequest(messages=[])).text == "fixed:other"
    finally:
        unregister_provider("fixed")


@pytest.mark.parametrize("name", ["", "a/b", None])
def test_provider_names_are_validated(name):
    with pytest.raises(ConfigurationError):
        register_provider(name, FixedModel)  # type: ignore[arg-type]


def test_a_factory_that_returns_no_model_is_a_configuration_error():
    register_provider("broken", lambda name: object())
    try:
        with pytest.raises(ConfigurationError, match="not a model"):
            resolve_model("broken/x")
    finally:
        unregister_provider("broken")
