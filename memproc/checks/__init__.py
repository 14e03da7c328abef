"""System checks (`manage.py check`) of the MEMPROC setting and the agents, with stable ids and hints.

Every key of MEMPROC has one small validator in VALIDATORS, run on its value or its default, so what
would fail at run time (a wrong type, a value out of range, a class that does not import, a choice
whose optional package is missing) fails here first. Checks import the code a setting names but
never build it: no model is loaded and no connection is opened.

| id | problem |
|---|---|
| memproc.E001 | an unknown key in MEMPROC (with a did-you-mean) |
| memproc.E002 | a dotted path that cannot be imported |
| memproc.E003 | MEMPROC is not a dict |
| memproc.E004 | BACKGROUND is not "inline" or "celery" |
| memproc.E005 | a boolean setting that is not True or False |
| memproc.E006 | RETENTION of the wrong shape |
| memproc.E007 | a number of the wrong type or out of range |
| memproc.E008 | a choice needs an optional package that is not installed (the hint names the extra) |
| memproc.E009 | a class setting of the wrong form (CLASS/OPTIONS, OPTIONS that do not fit, not callable) |
| memproc.E010 | the pgvector store on a database that is not PostgreSQL |
| memproc.E011 | MODELS, or one of its entries, is not a dict |
| memproc.E012 | MODELS names a model provider that is not registered |
| memproc.E013 | a MODELS option of the wrong type (api_key, base_url, timeout, ...) |
| memproc.E014 | DEFAULT_MODEL or an agent's model is malformed or names an unknown provider |
| memproc.E015 | ATTACHMENT_STORAGE names a storage that is not in STORAGES |
| memproc.E016 | ATTACHMENT_CONTENT_TYPES is not a list of content types |
| memproc.E017 | HNSW_BUILD_MEMORY is not a PostgreSQL memory size |
| memproc.E018 | HNSW_EF_CONSTRUCTION below twice HNSW_M |
| memproc.E019 | HNSW_INDEX_TYPE is not "vector" or "halfvec" |
| memproc.E020 | DATABASE_ROUTERS send memproc's tables to more than one database |
| memproc.W001 | semantic recall without pgvector uses exact in-process search (`check --database`) |
| memproc.W003 | a model provider in use, or an OpenAI embedder, has neither an API key nor a base_url |
| memproc.W004 | INLINE_ATTACHMENT_BYTES above MAX_ATTACHMENT_BYTES |
| memproc.W005 | a MODELS option that nothing reads |
| memproc.W006 | the EMBEDDER's packages are missing, and no registered agent recalls with it (yet) |
| memproc.W007 | kept database connections (CONN_MAX_AGE) without CONN_HEALTH_CHECKS |
| memproc.W008 | the attachment storage is an S3Storage on botocore's default 60 s timeouts |
| memproc.W009 | TOKENIZER "auto" has no tiktoken file in its cache and no quicktok-v1: counts are estimated |

"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.conf import settings as django_settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.db import connections

from memproc.agents.embedder import recall_embedder
from memproc.agents.registry import all_agents
from memproc.checks import backends, providers, storage, values
from memproc.checks.base import Relation, Validator, did_you_mean, error, pip_install
from memproc.conf import DEFAULTS, user_settings

__all__ = [
    "RELATIONS",
    "VALIDATORS",
    "check_agent_models",
    "check_attachment_storage",
    "check_settings",
    "check_vector_search",
]

VALIDATORS: dict[str, Validator] = {
    "EMBEDDER": backends.embedder,
    "VECTOR_STORE": backends.vector_store,
    "TOKENIZER": backends.tokenizer,
    "DEFAULT_MODEL": providers.default_model,
    "MODELS": providers.models_setting,
    "HNSW_EF_SEARCH": values.integer(1, 1000),  # pgvector's limits
    "HNSW_M": values.integer(2, 100),
    "HNSW_EF_CONSTRUCTION": values.integer(4, 1000),
    "HNSW_BUILD_MEMORY": values.postgres_memory,
    "HNSW_BUILD_WORKERS": values.optional(values.integer(0, 1024, unit="workers")),
    "HNSW_BUILD_MIN_ROWS": values.integer(0, unit="rows"),
    "HNSW_INDEX_TYPE": values.hnsw_index_type,
    "EXACT_SEARCH_MAX_ROWS": values.integer(0, unit="rows"),
    "EMBEDDING_CHUNK_CHARS": values.integer(1, unit="characters"),
    "ATTACHMENT_STORAGE": values.storage_alias,
    "MAX_ATTACHMENT_BYTES": values.integer(1, unit="bytes"),
    "INLINE_ATTACHMENT_BYTES": values.integer(0, unit="bytes"),
    "ATTACHMENT_CONTENT_TYPES": values.content_types,
    "ATTACHMENT_URL_EXPIRY": values.integer(1, unit="seconds"),
    "BACKGROUND": values.background,
    "BROKER_SEND_TIMEOUT": values.seconds,
    "MAX_WORKING_MEMORY_CHARS": values.integer(1, unit="characters"),
    "RESOURCE_RESOLVER": backends.resource_resolver,
    "MAX_REQUEST_MESSAGES": values.integer(1, unit="messages"),
    "API_ALLOW_SYSTEM_MESSAGES": values.boolean,
    "STORE_BLOCKED_CONTENT": values.boolean,
    "RECORD_TURNS": values.boolean,
    "RETENTION": values.retention,
    "TRACE_CONTENT": values.boolean,
    "MAX_TOOL_STEPS": values.integer(1, unit="steps"),
    "ASYNC_THREADS": values.integer(1, unit="threads"),
    "IDEMPOTENCY_TTL": values.integer(1, unit="seconds"),
    "IDEMPOTENCY_LEASE": values.integer(1, unit="seconds"),
}

RELATIONS: tuple[Relation, ...] = (values.inline_within_max, values.ef_construction_covers_m)


@register(Tags.compatibility)
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Every key of MEMPROC: known, and its value (or default) valid alone and with the others."""
    configured = getattr(django_settings, "MEMPROC", None)
    if configured is None:
        configured = {}
    if not isinstance(configured, Mapping):
        return [
            Error(
                f"MEMPROC is of type {type(configured).__name__}, not a dict.",  # it may hold API keys
                hint='Set MEMPROC = {"EMBEDDER": ..., ...} in settings, or leave it out for the defaults.',
                obj="MEMPROC",
                id="memproc.E003",
            )
        ]
    messages: list[CheckMessage] = [_unknown_key(key) for key in configured if key not in DEFAULTS]
    valid: dict[str, Any] = {}
    for key, default in DEFAULTS.items():
        value = configured.get(key, default)
        validator = VALIDATORS.get(key)  # tests/foundation/test_checks.py makes sure every key has one
        problems = validator(key, value) if validator is not None else []
        if not problems:
            valid[key] = value
        messages += problems
    for relation in RELATIONS:
        messages += relation(valid)
    return messages


def _unknown_key(key: Any) -> Error:
    # An error, not a warning: a misspelt key silently leaves its default in force.
    return error(
        key,
        f"is not a memproc setting.{did_you_mean(key, DEFAULTS)}",
        hint=f"Known keys: {', '.join(sorted(DEFAULTS))}.",
        id="E001",
    )


@register(Tags.compatibility)
def check_agent_models(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """The model every registered agent names resolves, and the providers in use have credentials."""
    configured = user_settings()
    if not isinstance(configured, Mapping):
        return []  # check_settings reports it
    models = configured.get("MODELS", DEFAULTS["MODELS"])
    in_use = [providers.provider_of(configured.get("DEFAULT_MODEL", DEFAULTS["DEFAULT_MODEL"]))]
    messages: list[CheckMessage] = []
    for agent in all_agents():
        spec = getattr(agent, "_model_spec", None)  # as given to Agent(model=...); None: DEFAULT_MODEL
        if spec is None:
            continue
        messages += providers.model_problems(spec, models=models, agent=agent.id)
        in_use.append(providers.provider_of(spec))
    messages += providers.missing_keys([p for p in in_use if p], models=models)
    return messages + _embedders_without_keys(configured, models=models)


def _embedders_without_keys(configured: Mapping[str, Any], *, models: Any) -> list[CheckMessage]:
    """W003 for the EMBEDDER setting, and each agent's own recall embedder, when it is an OpenAI
    embedder with no credentials: turns would save, then log a failure for every embedding."""
    found = backends.named("EMBEDDER", configured.get("EMBEDDER", DEFAULTS["EMBEDDER"]))
    candidates = [("The EMBEDDER setting", found.target, found.options)] if found.target is not None else []
    for agent in all_agents():
        own = recall_embedder(agent)
        if own is not None:
            candidates.append((f"The recall embedder of agent {agent.id!r}", own, {}))
    messages: dict[type, CheckMessage] = {}
    for where, embedder, options in candidates:
        found = providers.embedder_without_key(where, embedder, options, models=models)
        cls = embedder if isinstance(embedder, type) else type(embedder)
        if found is not None:
            # Once per class: an agent without an embedder of its own recalls with the setting's.
            messages.setdefault(cls, found)
    return list(messages.values())


@register(Tags.database)
def check_vector_search(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Semantic recall without pgvector still works, through exact in-process search: say so. Only
    with `check --database` (as Django's own database checks): Django before 6.0 runs database-tagged
    checks on every `check` and leaves it to them."""
    if not databases or "default" not in databases:
        return []
    if not any(agent.memory is not None and agent.memory.embeds_messages for agent in all_agents()):
        return []
    configured = user_settings()
    store = (
        configured.get("VECTOR_STORE", DEFAULTS["VECTOR_STORE"]) if isinstance(configured, Mapping) else None
    )
    if store != "auto" or connections["default"].vendor == "postgresql":
        return []  # an explicit store is a choice; "pgvector" off PostgreSQL is memproc.E010
    return [
        Warning(
            "Semantic recall is configured on a database without pgvector; "
            "memproc uses exact in-process search over each scope's vectors.",
            hint="That is fine for small scopes. For large ones use PostgreSQL with the pgvector "
            f"extension ({pip_install('postgres')}).",
            id="memproc.W001",
        )
    ]


@register(Tags.compatibility)
def check_connection_health(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Persistent connections (CONN_MAX_AGE) without CONN_HEALTH_CHECKS: after the database restarts,
    each stale connection fails one request (seen: 16 of 45 turns answered 503) before Django drops it."""
    return [
        Warning(
            f"DATABASES[{alias!r}] keeps connections (CONN_MAX_AGE={config.get('CONN_MAX_AGE')!r}) "
            "without CONN_HEALTH_CHECKS.",
            hint="Set CONN_HEALTH_CHECKS = True: Django then checks a kept connection before a request "
            "reuses it, so a database restart does not fail requests on stale connections.",
            obj="DATABASES",
            id="memproc.W007",
        )
        for alias, config in django_settings.DATABASES.items()
        if config.get("CONN_MAX_AGE", 0) != 0 and not config.get("CONN_HEALTH_CHECKS", False)
    ]


@register(Tags.compatibility)
def check_database_routing(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """memproc's tables in one database: a turn writes several of them in one transaction."""
    from django.apps import apps
    from django.db import router

    aliases = {
        model._meta.label: router.db_for_write(model) for model in apps.get_app_config("memproc").get_models()
    }
    if len(set(aliases.values())) <= 1:
        return []
    found = ", ".join(f"{label} → {alias}" for label, alias in sorted(aliases.items()))
    return [
        Error(
            f"DATABASE_ROUTERS send memproc's models to more than one database for writes: {found}.",
            hint="Route every model of the app label 'memproc' to one database (reads may go to its "
            "replicas): a turn saves threads, messages and embeddings in one transaction.",
            obj="DATABASE_ROUTERS",
            id="memproc.E020",
        )
    ]


@register(Tags.compatibility)
def check_attachment_storage(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """An S3 attachment storage on botocore's default timeouts waits minutes on a silent endpoint."""
    return storage.s3_timeouts()
