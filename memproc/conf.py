"""memproc settings: one `MEMPROC` dict read lazily with defaults, the way DRF reads REST_FRAMEWORK."""

from __future__ import annotations

from typing import Any

from django.conf import settings as django_settings
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils.module_loading import import_string

from memproc.exceptions import ConfigurationError

DEFAULTS: dict[str, Any] = {
    # Back ends (dotted paths, or {"CLASS": ..., "OPTIONS": {...}})
    "EMBEDDER": "memproc.embedders.MiniLMEmbedder",
    "VECTOR_STORE": "auto",
    # "auto": tiktoken when its o200k_base file is cached (never a download), else quicktok-v1 (the
    # offline-tokens extra), else an estimate (memproc.processors.token_choice; check W009).
    "TOKENIZER": "auto",
    "DEFAULT_MODEL": "local/echo",
    # Per-provider options: {"openai": {"api_key": ..., "base_url": ..., "timeout": 60}}
    "MODELS": {},
    # Vector search
    "HNSW_EF_SEARCH": 100,
    # HNSW build parameters of new indexes. ef_construction 128 (pgvector's default is 64) lifts
    # recall@10 at 1M vectors from 0.92 to 0.96-0.97 (bench/RESULTS.md); it costs ~1.5x per inserted
    # row and ~1.7x per build. 64 suits write-heavy sites that embed inline and search small scopes.
    "HNSW_M": 16,
    "HNSW_EF_CONSTRUCTION": 128,
    # maintenance_work_mem for the background index builds (memproc.build_index, memproc_index
    # --build; e.g. "1GB"); None keeps the server's. A graph that does not fit is finished on disk,
    # several times slower.
    "HNSW_BUILD_MEMORY": None,
    # max_parallel_maintenance_workers for those builds (pgvector builds HNSW in parallel); None keeps
    # the server's. Each worker is a process and a core: leave a core to the site.
    "HNSW_BUILD_WORKERS": 2,
    # An embedder's HNSW index is built (in the background) once it has this many rows; below it
    # every search is exact: up to 2,000 rows as fast as HNSW, at 5,000 a few ms slower (p50 9.8 ms
    # against 2.0 ms), past it ~3.5 ms more per 1,000 rows (bench/index_threshold.py; docs: Scaling).
    "HNSW_BUILD_MIN_ROWS": 5_000,
    # What the HNSW index holds: "halfvec" (2 bytes a dimension, up to 4,000 dimensions) or "vector"
    # (4 bytes, up to 2,000). halfvec: an index 43% smaller, built 10-25% faster, W2 searches as fast
    # or up to 16% faster, the same recall, the 1M check met (bench/RESULTS.md); searches return
    # full-precision distances either way. Migration 0014 converts existing indexes to the type set.
    # pgvector before 0.7 has no halfvec: there the indexes stay "vector".
    "HNSW_INDEX_TYPE": "halfvec",
    # pgvector: scopes up to this many rows are scored exactly (counting them is part of the query,
    # so the cap also bounds that count); larger ones use the HNSW index with iterative scans.
    "EXACT_SEARCH_MAX_ROWS": 2000,
    # MiniLM reads 256 tokens (~1,000 characters of English); longer chunks would be cut silently.
    "EMBEDDING_CHUNK_CHARS": 1000,
    # Attachments
    "ATTACHMENT_STORAGE": "memproc_attachments",
    "MAX_ATTACHMENT_BYTES": 10 * 1024 * 1024,
    # Files up to this size are always sent to the model as bytes (0: only when the provider needs it,
    # see MODELS[provider]["inline_attachments"]: True, False or a list of content types).
    "INLINE_ATTACHMENT_BYTES": 0,
    # The allow-list for uploaded files; None allows every type.
    "ATTACHMENT_CONTENT_TYPES": [
        "image/png",
        "image/jpeg",
        "image/gif",
        "image/webp",
        "application/pdf",
        "text/plain",
        "text/markdown",
        "text/csv",
        "application/json",
    ],
    "ATTACHMENT_URL_EXPIRY": 3600,
    # Background work: "inline" (after commit, in-process) or "celery"
    "BACKGROUND": "inline",
    # Seconds a caller waits, after its turn committed, for the Celery broker to take a job; past it
    # the job stays in the outbox and is sent later. No network wait happens inside a transaction.
    "BROKER_SEND_TIMEOUT": 5,
    # The longest working memory any write may leave (model, API, admin, code): it goes into every
    # turn's prompt. A WorkingMemory(max_tokens=...) sets a tighter limit per agent.
    "MAX_WORKING_MEMORY_CHARS": 32_000,
    # API
    "RESOURCE_RESOLVER": "memproc.api.permissions.user_resources",
    "MAX_REQUEST_MESSAGES": 200,
    # System messages in API input (rule 18): refused with a 400 unless this is True.
    "API_ALLOW_SYSTEM_MESSAGES": False,
    # Seconds an Idempotency-Key of generate/ and stream/ is remembered (its answer replayed).
    "IDEMPOTENCY_TTL": 24 * 60 * 60,
    # Seconds after which a repeat takes over a key whose first request still "runs" on another host
    # (one on the same host is taken over as soon as its process is gone). Keep it above the longest
    # turn: a turn makes at most MAX_TOOL_STEPS + 1 model calls, each within the provider's timeout
    # and retries, plus its tools' time. 5 minutes covers chat turns with a few tool steps.
    "IDEMPOTENCY_LEASE": 5 * 60,
    # Tripwires
    "STORE_BLOCKED_CONTENT": True,
    # Observability: a TurnRecord per turn (status, usage, why the model saw what it saw), and
    # message text on OpenTelemetry spans (off: spans carry ids, counts and timings only).
    "RECORD_TURNS": True,
    # Days after which expired data is deleted (memproc.purge_expired, memproc_purge --expired);
    # None keeps it forever. Missing keys take these defaults.
    "RETENTION": None,
    "TRACE_CONTENT": False,
    # Agent loop
    "MAX_TOOL_STEPS": 8,
    # Worker threads for the blocking steps of async turns (agenerate/astream, ASGI streams) and for
    # sync-only models; a step holds a thread (and a database connection) only while it runs.
    "ASYNC_THREADS": 32,
}


class MemprocSettings:
    """Reads settings.MEMPROC lazily; unknown keys are an error, not a silent default."""

    def __getattr__(self, name: str) -> Any:
        if name not in DEFAULTS:
            raise AttributeError(f"memproc has no setting {name!r}")
        value = user_settings().get(name, DEFAULTS[name])
        self.__dict__[name] = value
        return value

    def reload(self) -> None:
        self.__dict__.clear()


settings = MemprocSettings()

DEFAULT_RETENTION: dict[str, int | None] = {
    "messages_days": None,
    "tripwire_logs_days": 90,
    "turn_records_days": 90,
    # Attachments no message holds (stored but never sent in a message), with their files.
    "orphan_attachments_days": 7,
    # Files on the attachment storage that no attachment row references: staged by a turn whose
    # process died before its commit. The days are a grace period: a turn in flight is never touched.
    "orphan_files_days": 1,
}


def user_settings() -> dict[str, Any]:
    return getattr(django_settings, "MEMPROC", None) or {}


def build_from_setting(value: Any, *, setting: str, **extra: Any) -> Any:
    """Builds an object named by a setting: a dotted path, `{"CLASS", "OPTIONS"}`, a class or an instance."""
    options: dict[str, Any] = {}
    if isinstance(value, dict):
        options = dict(value.get("OPTIONS", {}))
        value = value.get("CLASS")
    if isinstance(value, str):
        try:
            value = import_string(value)
        except ImportError as exc:
            raise ConfigurationError(f"MEMPROC[{setting!r}]: cannot import {value!r}: {exc}") from exc
    if isinstance(value, type):
        return value(**options, **extra)
    return value


@receiver(setting_changed)
def _reload_settings(*, setting: str, **kwargs: Any) -> None:
    if setting == "MEMPROC":
        settings.reload()
