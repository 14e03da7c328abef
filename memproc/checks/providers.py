"""Validators of the model settings: MODELS, DEFAULT_MODEL, and the models registered agents name.

A provider is known when it is registered (`memproc.llm.registry.register_provider`; memproc registers
"openai" and "local") or declared OpenAI-compatible in MODELS (`{"api": "openai", "base_url": ...}`).
Nothing here builds a model: the SDK is looked for, never imported, and no request is made.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

from django.core.checks import CheckMessage, Error, Warning

from memproc.checks.base import did_you_mean, error, installed, is_int, is_number, pip_install, show, warning
from memproc.checks.values import CONTENT_TYPE
from memproc.conf import DEFAULTS, user_settings
from memproc.embedders.openai import OpenAIEmbedder
from memproc.llm.registry import registered_providers

# What OpenAIChatModel and the attachment resolver read from MODELS[provider].
OPENAI_OPTIONS = ("api", "api_key", "base_url", "timeout", "max_retries", "extra_body", "inline_attachments")
# What the attachment resolver reads from MODELS["provider/model"]; nothing else reads those entries.
PER_MODEL_OPTIONS = ("inline_attachments",)
LOCAL_MODELS = ("echo",)
MODELS_HINT = (
    'MEMPROC["MODELS"] = {"openai": {"api_key": ..., "base_url": ...}}: one dict of options per provider.'
)


def openai_aliases(models: Any) -> set[str]:
    """Providers MODELS declares OpenAI-compatible, as the registry finds them."""
    if not isinstance(models, Mapping):
        return set()
    return {
        name for name, opts in models.items() if isinstance(opts, Mapping) and opts.get("api") == "openai"
    }


def known_providers(models: Any) -> set[str]:
    return set(registered_providers()) | openai_aliases(models)


def speaks_openai(provider: str, models: Any) -> bool:
    return provider == "openai" or provider in openai_aliases(models)


# --- MODELS ------------------------------------------------------------------------------------------


def models_setting(key: str, value: Any) -> list[CheckMessage]:
    if not isinstance(value, Mapping):
        # Only the type: the value may hold API keys.
        return [error(key, f"is of type {type(value).__name__}, not a dict.", hint=MODELS_HINT, id="E011")]
    known = known_providers(value)
    messages: list[CheckMessage] = []
    for name, options in value.items():
        if not isinstance(name, str) or not name.strip("/"):
            messages.append(
                error(key, f"has the key {show(name)}, not a provider name.", hint=MODELS_HINT, id="E011")
            )
            continue
        where = (key, name)
        if not isinstance(options, Mapping):
            text = f"is of type {type(options).__name__}, not a dict of options."
            messages.append(error(where, text, hint=MODELS_HINT, id="E011"))
            continue
        provider, per_model, _ = name.partition("/")
        if provider not in known:
            messages.append(_unknown_provider(where, provider, known))
        messages += _options(where, options, per_model=bool(per_model), openai=speaks_openai(provider, value))
    return messages


def _unknown_provider(where: tuple[str, str], provider: str, known: Iterable[str]) -> Error:
    return error(
        where,
        f"names the model provider {provider!r}, which is not registered.{did_you_mean(provider, known)}",
        hint=f"Known providers: {', '.join(sorted(known))}. For an OpenAI-compatible server add "
        '"api": "openai" and its "base_url"; otherwise register the provider with '
        "memproc.llm.registry.register_provider().",
        id="E012",
    )


def _options(
    where: tuple[str, str], options: Mapping[str, Any], *, per_model: bool, openai: bool
) -> list[CheckMessage]:
    messages: list[CheckMessage] = []
    if per_model or openai:  # other providers may read options of their own
        allowed = PER_MODEL_OPTIONS if per_model else OPENAI_OPTIONS
        for name in options:
            if name not in allowed:
                messages.append(
                    warning(
                        where,
                        f"has the option {show(name)}, which nothing reads.{did_you_mean(name, allowed)}",
                        hint=f"{'A per-model entry' if per_model else 'This provider'} reads "
                        f"{', '.join(allowed)}.",
                        id="W005",
                    )
                )
    for name, problem in _option_problems(options):
        messages.append(error((*where, name), problem[0], hint=problem[1], id="E013"))
    return messages


def _option_problems(options: Mapping[str, Any]) -> Iterable[tuple[str, tuple[str, str]]]:
    """(option, (message, hint)) for each option of the wrong type; an api_key's value is never shown."""
    if "api" in options and options["api"] != "openai":
        yield (
            "api",
            (f"is {show(options['api'])}.", 'The one API memproc speaks is "openai" (chat completions).'),
        )
    api_key = options.get("api_key")
    if api_key is not None and not isinstance(api_key, str):
        yield (
            "api_key",
            (
                f"is of type {type(api_key).__name__}, not a string.",
                'Use a string, for example os.environ["OPENAI_API_KEY"].',
            ),
        )
    base_url = options.get("base_url")
    if base_url not in (None, "") and not _http_url(base_url):
        yield (
            "base_url",
            (
                f"is {show(base_url)}, not an http(s) URL.",
                'Use the server\'s API root with its scheme, like "http://localhost:11434/v1".',
            ),
        )
    timeout = options.get("timeout")
    if timeout is not None and not (is_number(timeout) and timeout > 0):
        yield (
            "timeout",
            (f"is {show(timeout)}, not a positive number of seconds.", "Use a number such as 60."),
        )
    retries = options.get("max_retries")
    if retries is not None and not (is_int(retries) and 0 <= retries <= 10):
        yield "max_retries", (f"is {show(retries)}.", "Use a whole number from 0 to 10 (the default is 2).")
    extra_body = options.get("extra_body")
    if extra_body is not None and not isinstance(extra_body, Mapping):
        yield (
            "extra_body",
            (f"is of type {type(extra_body).__name__}, not a dict.", "Use a dict of extra request fields."),
        )
    if "inline_attachments" in options and not _inline_option(options["inline_attachments"]):
        yield (
            "inline_attachments",
            (
                f"is {show(options['inline_attachments'])}.",
                "Use True (send file bytes), False (send URLs) or a list of content types such as "
                '["application/pdf", "text/*"].',
            ),
        )


def _http_url(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    try:
        parts = urlsplit(value)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def _inline_option(value: Any) -> bool:
    if isinstance(value, bool):
        return True
    return isinstance(value, (list, tuple)) and all(
        isinstance(v, str) and CONTENT_TYPE.match(v) for v in value
    )


# --- model strings: DEFAULT_MODEL and agents' models ---------------------------------------------------


def default_model(key: str, value: Any) -> list[CheckMessage]:
    return model_problems(value, models=_models(), setting=key)


def model_problems(spec: Any, *, models: Any, setting: str = "", agent: str = "") -> list[CheckMessage]:
    """What would stop `spec` ("provider/model" or a model object) from resolving."""
    if not isinstance(spec, str):
        if callable(getattr(spec, "generate", None)):
            return []
        return [
            _model_message(
                f"is {show(spec)}, not a 'provider/model' string or a model object.", setting, agent
            )
        ]
    provider, sep, name = spec.strip().partition("/")
    if not sep or not provider or not name.strip("/"):
        return [_model_message(f"is {spec!r}, not of the form 'provider/model'.", setting, agent)]
    known = known_providers(models)
    if provider not in known:
        text = f"is {spec!r}, whose provider {provider!r} is not registered.{did_you_mean(provider, known)}"
        return [_model_message(text, setting, agent, known=known)]
    if provider == "local" and name not in LOCAL_MODELS:
        return [_model_message(f"is {spec!r}; the local provider has only 'local/echo'.", setting, agent)]
    if speaks_openai(provider, models) and not installed("openai"):
        text = f"is {spec!r}, which needs the openai package; it is not installed."
        return [_model_message(text, setting, agent, id="E008", hint=pip_install("openai") + ".")]
    return []


def _model_message(
    text: str, setting: str, agent: str, *, known: Iterable[str] = (), id: str = "E014", hint: str = ""
) -> Error:
    hint = hint or (
        f"Known providers: {', '.join(sorted(known or known_providers(_models())))}. Use 'provider/model' "
        "(like 'openai/gpt-4o-mini' or 'local/echo'); for another OpenAI-compatible server, declare "
        'MEMPROC["MODELS"][name] = {"api": "openai", "base_url": ...}.'
    )
    if setting:
        return error(setting, text, hint=hint, id=id)
    return Error(
        f"The model of agent {agent!r} {text}", hint=hint, obj=f"agent {agent!r}", id=f"memproc.{id}"
    )


def has_credentials(provider: str, *, models: Any) -> bool:
    """Whether MODELS (or, for "openai", the SDK's environment variables) give `provider` a key or a
    base_url, as OpenAIChatModel and OpenAIEmbedder look for them."""
    options = models.get(provider) if isinstance(models, Mapping) else None
    options = options if isinstance(options, Mapping) else {}
    if options.get("api_key") or options.get("base_url"):
        return True
    return provider == "openai" and bool(
        os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL")
    )


def embedder_without_key(
    where: str, embedder: Any, options: Mapping[str, Any], *, models: Any
) -> Warning | None:
    """W003 for an OpenAI embedder with no key anywhere it looks (its options, MODELS["openai"], the
    environment); None when it has one, or is not an OpenAI embedder. Without the SDK nothing is said
    here: W006/E008 say that."""
    cls = embedder if isinstance(embedder, type) else type(embedder)
    if not (isinstance(cls, type) and issubclass(cls, OpenAIEmbedder)):
        return None
    if not isinstance(embedder, type):
        options = {"api_key": embedder.api_key, "base_url": embedder.base_url}
    if options.get("api_key") or options.get("base_url") or has_credentials("openai", models=models):
        return None
    return Warning(
        f"{where} is an OpenAIEmbedder with no API key and no base_url: every message it should embed "
        "would fail, and semantic recall with it.",
        hint='Set MEMPROC["MODELS"]["openai"]["api_key"] (or the OPENAI_API_KEY environment variable), '
        'give the embedder "api_key"/"base_url" OPTIONS, or use the offline MiniLMEmbedder.',
        obj="MEMPROC",
        id="memproc.W003",
    )


def missing_keys(providers: Iterable[str], *, models: Any) -> list[CheckMessage]:
    """A warning per OpenAI-compatible provider in use that has neither an API key nor a base_url."""
    messages: list[CheckMessage] = []
    for provider in sorted(set(providers)):
        if not speaks_openai(provider, models) or has_credentials(provider, models=models):
            continue
        from_env = provider == "openai"
        env = " (or the OPENAI_API_KEY environment variable)" if from_env else ""
        messages.append(
            Warning(
                f"Model provider {provider!r} is used but has no API key and no base_url: its turns "
                "would fail.",
                hint=f'Set MEMPROC["MODELS"][{provider!r}]["api_key"]{env}, or a "base_url" for a local '
                "server that needs no key.",
                obj="MEMPROC",
                id="memproc.W003",
            )
        )
    return messages


def provider_of(spec: Any) -> str | None:
    if not isinstance(spec, str) or "/" not in spec:
        return None
    return spec.strip().partition("/")[0] or None


def _models() -> Any:
    """MODELS as configured (not through `memproc.conf.settings`, which assumes MEMPROC is a dict)."""
    configured = user_settings()
    return configured.get("MODELS", DEFAULTS["MODELS"]) if isinstance(configured, Mapping) else {}
