"""What the OpenAI-compatible adapter is configured with, and the SDK it loads on first use.

The options come from the model's arguments, then `MEMPROC["MODELS"][provider]`, then (for the
`openai` provider) the environment; `OpenAIChatModel.options()` resolves them with these helpers.
The API key is a `Secret` from the moment it is read, so no frame or repr holds it bare.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from memproc.conf import settings
from memproc.exceptions import ConfigurationError
from memproc.llm.secret import Secret

DEFAULT_TIMEOUT = 60.0
DEFAULT_MAX_RETRIES = 2
# Local servers ignore the key, but the SDK refuses to build a client without one.
PLACEHOLDER_API_KEY = "not-needed"


@dataclass(frozen=True)
class Options:
    api_key: Secret  # masked in this dataclass's repr, and so on Django's DEBUG page
    base_url: str | None
    timeout: float
    max_retries: int = DEFAULT_MAX_RETRIES
    extra_body: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)


def sdk() -> Any:
    try:
        import openai
    except ImportError as exc:
        raise ConfigurationError(
            "The 'openai' package is needed for 'openai/...' models: pip install 'django-memproc[openai]'"
        ) from exc
    return openai


def check_retries(value: Any, *, where: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 10:
        raise ConfigurationError(f"{where} must be an integer from 0 to 10, not {value!r}")


def check_timeout(value: Any, *, where: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ConfigurationError(f"{where} must be a positive number of seconds, not {value!r}")


def provider_settings(provider: str) -> dict[str, Any]:
    """`MEMPROC["MODELS"][provider]`, its `api_key` already a `Secret` (so no frame holds it bare)."""
    configured = (settings.MODELS or {}).get(provider) or {}
    if not isinstance(configured, Mapping):
        raise ConfigurationError(f'MEMPROC["MODELS"][{provider!r}] must be a dict')
    options = dict(configured)
    if options.get("api_key"):
        options["api_key"] = Secret(str(options["api_key"]))
    return options


def environ_secret(name: str) -> Secret | None:
    value = os.environ.get(name)
    return Secret(value) if value else None
