"""System checks for the MEMPROC setting, with stable ids and hints."""

from __future__ import annotations

from typing import Any

from django.core.checks import Error, Tags, Warning, register
from django.db import connections
from django.utils.module_loading import import_string

from memproc.agents.registry import all_agents
from memproc.conf import DEFAULTS, user_settings

DOTTED_PATH_KEYS = ("EMBEDDER", "TOKENIZER", "RESOURCE_RESOLVER")
BOOLEAN_KEYS = ("STORE_BLOCKED_CONTENT", "API_ALLOW_SYSTEM_MESSAGES")


@register(Tags.compatibility)
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    errors: list[Any] = []
    configured = user_settings()
    if not isinstance(configured, dict):
        return [Error("MEMPROC must be a dict.", hint="Set MEMPROC = {...} in settings.", id="memproc.E003")]
    for key in configured:
        if key not in DEFAULTS:
            errors.append(
                Error(
                    f"MEMPROC has an unknown key {key!r}.",
                    hint=f"Known keys: {', '.join(sorted(DEFAULTS))}.",
                    obj="MEMPROC",
                    id="memproc.E001",
                )
            )
    for key in DOTTED_PATH_KEYS:
        value = configured.get(key, DEFAULTS[key])
        path = value.get("CLASS") if isinstance(value, dict) else value
        if isinstance(path, str):
            try:
                import_string(path)
            except ImportError as exc:
                errors.append(
                    Error(
                        f"MEMPROC[{key!r}] names {path!r}, which cannot be imported: {exc}.",
                        hint="Check the dotted path, and install the extra it needs "
                        "(for example `pip install memproc[embeddings]`).",
                        obj="MEMPROC",
                        id="memproc.E002",
                    )
                )
    for key in BOOLEAN_KEYS:
        if key in configured and not isinstance(configured[key], bool):
            errors.append(
                Error(
                    f"MEMPROC[{key!r}] is {configured[key]!r}, not a boolean.",
                    hint="Use True or False.",
                    obj="MEMPROC",
                    id="memproc.E005",
                )
            )
    background = configured.get("BACKGROUND", DEFAULTS["BACKGROUND"])
    if background not in ("inline", "celery"):
        errors.append(
            Error(
                f"MEMPROC['BACKGROUND'] is {background!r}.",
                hint='Use "inline" or "celery".',
                obj="MEMPROC",
                id="memproc.E004",
            )
        )
    return errors


@register(Tags.database)
def check_vector_search(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[Any]:
    """Semantic recall without pgvector still works, through exact in-process search: say so."""
    if not any(agent.memory is not None and agent.memory.uses_semantic_recall for agent in all_agents()):
        return []
    store = user_settings().get("VECTOR_STORE", DEFAULTS["VECTOR_STORE"])
    if store not in ("auto", "pgvector") or connections["default"].vendor == "postgresql":
        return []
    return [
        Warning(
            "Semantic recall is configured on a database without pgvector; "
            "memproc uses exact in-process search over each scope's vectors.",
            hint="That is fine for small scopes. For large ones use PostgreSQL with the pgvector "
            "extension (pip install memproc[postgres]).",
            id="memproc.W001",
        )
    ]
