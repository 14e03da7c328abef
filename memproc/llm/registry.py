"""Turns `"provider/model"` strings into chat models.

Built adapters are cached per spec string, because an OpenAI client holds a connection pool worth
reusing across turns. The cache is cleared whenever `MEMPROC` changes (`override_settings` in tests,
or a settings reload), so adapters never outlive the options they were built from.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from django.core.signals import setting_changed
from django.dispatch import receiver

from memproc.conf import settings
from memproc.exceptions import ConfigurationError
from memproc.llm.types import ChatModel

__all__ = [
    "ProviderFactory",
    "clear_cache",
    "register_provider",
    "registered_providers",
    "resolve_model",
    "unregister_provider",
]

# A factory receives the part after "provider/" (which may itself contain slashes, as in
# OpenRouter's "openai/gpt-4o") and returns a ready model.
ProviderFactory = Callable[[str], ChatModel]

_providers: dict[str, ProviderFactory] = {}
# Model objects, not data: each keeps its HTTP client and connection pool, built once per name.
_cache: dict[str, ChatModel] = {}
_lock = threading.Lock()


def register_provider(name: str, factory: ProviderFactory, *, replace: bool = False) -> None:
    """Makes `"<name>/<model>"` resolve through `factory(model)`.

    Registering a name twice is an error unless `replace=True`, so two apps cannot silently fight
    over one provider name.
    """
    if not isinstance(name, str) or not name or "/" in name:
        raise ConfigurationError(f"A provider name must be a non-empty string without '/', not {name!r}")
    if not callable(factory):
        raise ConfigurationError(f"The factory for provider {name!r} must be callable")
    with _lock:
        if name in _providers and _providers[name] is not factory and not replace:
            raise ConfigurationError(
                f"A model provider named {name!r} is already registered; pass replace=True to override it"
            )
        _providers[name] = factory
        _cache.clear()


def unregister_provider(name: str) -> None:
    """Forgets a provider (and every model built through the registry); unknown names are ignored."""
    with _lock:
        _providers.pop(name, None)
        _cache.clear()


def registered_providers() -> list[str]:
    return sorted(_providers)


def clear_cache() -> None:
    with _lock:
        _cache.clear()


def resolve_model(spec: str | ChatModel | None = None) -> ChatModel:
    """A model from a `"provider/model"` string, a model object (returned as is), or None (the default).

    None means `MEMPROC["DEFAULT_MODEL"]`, read now rather than at import time.
    """
    if spec is None:
        spec = settings.DEFAULT_MODEL
        if not isinstance(spec, str) and callable(getattr(spec, "generate", None)):
            return spec
    if not isinstance(spec, str):
        if callable(getattr(spec, "generate", None)):
            return spec
        raise ConfigurationError(
            f"A model must be a 'provider/model' string or an object with a generate() method, not {spec!r}"
        )
    with _lock:
        cached = _cache.get(spec)
    if cached is not None:
        return cached
    model = _build(spec)
    with _lock:
        return _cache.setdefault(spec, model)


def _build(spec: str) -> ChatModel:
    provider, sep, name = spec.strip().partition("/")
    if not sep or not provider or not name.strip("/"):
        raise ConfigurationError(
            f"Model {spec!r} is not of the form 'provider/model' (for example 'openai/gpt-4o-mini' "
            "or 'local/echo')"
        )
    factory = _providers.get(provider) or _settings_provider(provider)
    if factory is None:
        known = ", ".join(sorted({*_providers, *_openai_compatible_aliases()}))
        raise ConfigurationError(
            f"Unknown model provider {provider!r} in {spec!r}; known providers: {known}. "
            "Register one with memproc.llm.registry.register_provider(), or add "
            f'MEMPROC["MODELS"][{provider!r}] = {{"api": "openai", "base_url": ...}} '
            "for an OpenAI-compatible server."
        )
    model = factory(name)
    if not callable(getattr(model, "generate", None)):
        raise ConfigurationError(f"The factory for provider {provider!r} returned {model!r}, not a model")
    return model


def _openai_compatible_aliases() -> list[str]:
    """Providers declared in settings as OpenAI-compatible (`{"api": "openai", ...}`)."""
    models = settings.MODELS or {}
    return [name for name, opts in models.items() if isinstance(opts, dict) and opts.get("api") == "openai"]


def _settings_provider(provider: str) -> ProviderFactory | None:
    """Lets `MEMPROC["MODELS"]["ollama"] = {"api": "openai", "base_url": ...}` enable "ollama/llama3.2"."""
    if provider not in _openai_compatible_aliases():
        return None

    def factory(name: str) -> ChatModel:
        return _openai(name, provider=provider)

    return factory


def _openai(name: str, *, provider: str = "openai") -> ChatModel:
    from memproc.llm.openai import OpenAIChatModel

    model = OpenAIChatModel(name, provider=provider)
    model.client  # noqa: B018  (fails now, with a clear message, if the SDK, key or base_url is missing)
    return model


def _local(name: str) -> ChatModel:
    from memproc.llm.local import EchoModel

    if name != "echo":
        raise ConfigurationError(f"Unknown local model 'local/{name}'; the local provider has 'local/echo'")
    return EchoModel()


register_provider("openai", _openai)
register_provider("local", _local)


@receiver(setting_changed)
def _reset_on_setting_changed(*, setting: str, **kwargs: Any) -> None:
    if setting == "MEMPROC":
        clear_cache()
