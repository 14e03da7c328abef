"""System checks for the MEMPROC setting, with stable ids and hints."""

from __future__ import annotations

from typing import Any

from django.core.checks import Error, Tags, Warning, register
from django.db import connections
from django.utils.module_loading import import_string

from memproc.agents.registry import all_agents
from memproc.conf import DEFAULT_RETENTION, DEFAULTS, user_settings

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
    errors += _retention_errors(configured.get("RETENTION"))
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


def _retention_errors(retention: Any) -> list[Any]:
    if retention is None:
        return []
    known = set(DEFAULT_RETENTION)
    bad = not isinstance(retention, dict) or set(retention) - known
    if not bad:
        bad = any(
            v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1)
            for v in retention.values()
        )
    if not bad:
        return []
    return [
        Error(
            f"MEMPROC['RETENTION'] is {retention!r}.",
            hint=f"A dict with some of {', '.join(sorted(known))}: a number of days (>= 1) or None.",
            obj="MEMPROC",
            id="memproc.E006",
        )
    ]


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
