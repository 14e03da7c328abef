"""memproc's background tasks: thin interfaces over services, run by Celery or inline.

Wire names (never renamed; payloads are ids and small scalars, JSON-serialisable):

- ``memproc.embed_messages``      ``{"message_ids": [...], "agent_id": str | None,
  "embedder": dotted path | None, "vector_store": dotted path | None}`` (stored messages' keys,
  ``Message.pk``; jobs queued before migration 0018 carry bare message ids, which are found too)
- ``memproc.generate_title``      ``{"thread_id": str, "agent_id": str, "resource_id": str,
  "agent_model": str | None, "title_model": str | None, "instructions": str | None}`` (a thread id
  names a thread within its resource; jobs sent before 0.2 carry no resource_id, before 0.3 no models)
- ``memproc.backfill_embeddings`` ``{"embedder": dotted path | None, "agent_id": str | None,
  "batch_size": int, "resource_id": str | None, "thread_id": str | None}``
- ``memproc.purge_resource``      ``{"resource_id": str}``
- ``memproc.purge_expired``       ``{}`` (what RETENTION says has expired; schedule it daily with
  Celery beat)
- ``memproc.outbox_dispatch``     ``{"limit": int}`` (re-sends background jobs that could not be sent
  when their work committed, e.g. while the broker was down; schedule it every minute with Celery beat)
- ``memproc.expire_pending_tool_calls`` ``{}`` (rejects, as expired, the tool calls that waited past
  their time and resumes their turns; resumes decided turns whose worker died; schedule it every
  minute with Celery beat)
- ``memproc.compact_thread``      ``{"thread_id": str, "resource_id": str, "through_sequence": int,
  "trigger_tokens": int, "keep_tokens": int, "model": "provider/model" | "extractive" | None,
  "agent_id": str | None, "agent_model": str | None}`` (folds a long thread's older messages into
  its summary; sent after a turn of an agent with ``Memory(compaction=...)`` found a fold due)
- ``memproc.index_merge``         ``{"embedder_id": str | None, "dimensions": int | None,
  "using": str | None}`` (PostgreSQL: moves embeddings written outside the HNSW graph into it; sent
  by the pgvector store once a process has written enough of them; builds the embedder's index
  when it has grown past HNSW_BUILD_MIN_ROWS without one)
- ``memproc.build_index``         ``{"embedder_id": str | None, "dimensions": int | None,
  "using": str | None, "force": bool}`` (PostgreSQL: builds a missing or invalid HNSW index
  CONCURRENTLY once the embedder has HNSW_BUILD_MIN_ROWS rows, any number with force; sent when
  ``Memory.bulk_import()`` ends; with no embedder, every one: schedule it with Celery beat if
  processes rarely write 500 rows)

Every task is idempotent: it may run twice (``acks_late`` redelivers after a worker dies) with no
harm. Transient failures (an embedder or a model provider unavailable or rate-limited, a database
connection dropped) retry with exponential backoff; anything else is permanent: logged with the
payload and dropped, never retried and never raised into the worker.

`TASKS` maps each wire name to a plain function taking the same keyword arguments; they are
registered with `memproc.background` when the app is ready (`MemprocConfig.ready` imports this
module), and inline mode (`MEMPROC["BACKGROUND"] = "inline"`, the default) runs them, so Celery is
needed only with `"celery"`. The tasks look agents up here, in the interface, and hand the services
what they need (the agent, its embedder).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from typing import Any

from django.db import InterfaceError, OperationalError

from memproc import background, logs
from memproc.agents import get_agent
from memproc.agents.embedder import agent_embedder, agent_vector_store
from memproc.exceptions import EmbedderUnavailable, ModelRateLimitError, ModelUnavailableError
from memproc.selectors.threads import thread_key_for
from memproc.services import approvals
from memproc.services.compaction.job import thread_compact
from memproc.services.purge import expired_purge, resource_purge
from memproc.services.recall import messages_embed
from memproc.services.reindex import embedding_index_build, embedding_index_merge, reindex_run
from memproc.services.titles import thread_title_generate, title_options

logger = logging.getLogger(__name__)

TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    EmbedderUnavailable,
    ModelUnavailableError,
    ModelRateLimitError,
    OperationalError,
    InterfaceError,
)
RETRY_OPTIONS: dict[str, Any] = {
    "autoretry_for": TRANSIENT_ERRORS,
    "retry_backoff": 2,  # retry within 2 s, then 4, 8, ... (random below each bound), at most 600 s
    "retry_backoff_max": 600,
    "retry_jitter": True,
    "max_retries": 8,
    "acks_late": True,
    "ignore_result": True,
}


# --- plain task bodies (inline mode runs these; the Celery tasks below wrap them) -----------------


def embed_messages(
    message_ids: list[str],
    agent_id: str | None = None,
    embedder: str | None = None,
    vector_store: str | None = None,
) -> int:
    """Embeds stored messages in one batch with `embedder` (a dotted path), else the agent's recall
    embedder, else the EMBEDDER setting, into `vector_store` (a dotted path), else the agent's recall
    store, else the VECTOR_STORE setting. Messages already embedded by that embedder, and messages
    deleted since, are skipped."""
    return messages_embed(
        message_keys=list(message_ids),
        embedder=embedder or agent_embedder(agent_id=agent_id),
        vector_store=vector_store or agent_vector_store(agent_id=agent_id),
    )


def generate_title(
    thread_id: str,
    agent_id: str,
    resource_id: str | None = None,
    agent_model: str | None = None,
    title_model: str | None = None,
    instructions: str | None = None,
) -> str | None:
    """Titles an untitled thread from its first user message: with the options of agent `agent_id`
    when it is registered here, else with the job's `title_model` or `agent_model` and
    `instructions` (jobs sent before 0.3 carry neither: LookupError, permanent)."""
    key = thread_key_for(thread_id=thread_id, resource_id=resource_id)
    try:
        agent = get_agent(agent_id)
    except LookupError:
        if not (title_model or agent_model):
            raise
        model, chosen = title_model or agent_model, instructions
    else:
        options = title_options(generate_title=agent.memory.generate_title, agent_model=agent.model)
        model, chosen = options["model"], options["instructions"]
    return thread_title_generate(thread_key=key, model=model, instructions=chosen)


def backfill_embeddings(
    embedder: str | None = None,
    agent_id: str | None = None,
    batch_size: int = 100,
    resource_id: str | None = None,
    thread_id: str | None = None,
) -> int:
    """Embeds, in batches, every message (of a resource or thread, if given) that has no vector from
    the embedder: `embedder` (a dotted path), else the agent's, else the EMBEDDER setting. Returns
    the number of messages embedded."""
    summary = reindex_run(
        embedder=embedder or agent_embedder(agent_id=agent_id),
        thread_id=thread_id,
        resource_id=resource_id,
        batch_size=batch_size,
    )
    return summary.embedded


def purge_resource(resource_id: str) -> dict[str, int]:
    """Deletes everything stored for a resource (see `resource_purge`); returns the counts."""
    return resource_purge(resource_id=resource_id).as_dict()


def purge_expired() -> dict[str, int]:
    """Deletes what RETENTION says has expired (see `expired_purge`); returns the counts."""
    return expired_purge()


def outbox_dispatch(limit: int = 500) -> dict[str, int]:
    """Delivers the outbox's due jobs (see `memproc.background`); returns the counts."""
    return background.outbox_dispatch(limit=limit)


def expire_pending_tool_calls() -> dict[str, int]:
    """Expires the tool calls that waited too long and resumes stalled decided turns
    (memproc.services.approvals); returns the counts."""
    return {"expired": approvals.expire_due(), "resumed": approvals.resume_stalled()}


def resume_tool_call(pending_id: str) -> bool:
    """Resumes the turn of a decided tool call (`approvals.approve_later`); idempotent: a turn that
    completed, or whose resume another worker holds, is left alone. Whether this run resumed it."""
    return approvals.resume(pending_id) is not None


def compact_thread(
    thread_id: str,
    through_sequence: int,
    trigger_tokens: int,
    keep_tokens: int,
    model: str | None = None,
    agent_id: str | None = None,
    agent_model: str | None = None,
    resource_id: str | None = None,
) -> int:
    """Folds the thread's messages after its summary through `through_sequence` into the summary
    (see `thread_compact`); returns the number of folds. The summarizer is `model` ("provider/model"
    or "extractive"), else the model of agent `agent_id` when it is registered here, else
    `agent_model` (the agent's model id, as the turn saw it; None: the DEFAULT_MODEL setting's). A
    model id that cannot be resolved here is a ConfigurationError (permanent)."""
    revisions = thread_compact(
        thread_key=thread_key_for(thread_id=thread_id, resource_id=resource_id),
        through_sequence=through_sequence,
        trigger_tokens=trigger_tokens,
        keep_tokens=keep_tokens,
        model=model or _agent_model(agent_id, agent_model),
    )
    return len(revisions)


def index_merge(
    embedder_id: str | None = None, dimensions: int | None = None, using: str | None = None
) -> int:
    """Marks the embedder's unindexed embeddings (all embedders' when None) as indexed, in batches
    (see `embedding_index_merge`); returns the number of rows marked."""
    return embedding_index_merge(embedder_id=embedder_id, dimensions=dimensions, using=using)


def build_index(
    embedder_id: str | None = None,
    dimensions: int | None = None,
    using: str | None = None,
    force: bool = False,
) -> dict[str, str]:
    """Builds the embedder's HNSW index (every embedder's when None) where it pays and is not valid
    (see `embedding_index_build`); returns index name -> what happened."""
    return embedding_index_build(embedder_id=embedder_id, dimensions=dimensions, using=using, force=force)


def _agent_model(agent_id: str | None, agent_model: str | None) -> Any:
    """The agent's model when it is registered here, else its model id (None: the DEFAULT_MODEL)."""
    if agent_id:
        try:
            return get_agent(agent_id).model
        except LookupError:
            pass
    return agent_model


TASKS: dict[str, Callable[..., Any]] = {
    "memproc.embed_messages": embed_messages,
    "memproc.generate_title": generate_title,
    "memproc.backfill_embeddings": backfill_embeddings,
    "memproc.purge_resource": purge_resource,
    "memproc.purge_expired": purge_expired,
    "memproc.outbox_dispatch": outbox_dispatch,
    "memproc.compact_thread": compact_thread,
    "memproc.index_merge": index_merge,
    "memproc.build_index": build_index,
    "memproc.expire_pending_tool_calls": expire_pending_tool_calls,
    "memproc.resume_tool_call": resume_tool_call,
}


def _register_inline_bodies() -> None:
    for name, function in TASKS.items():
        background.register_task(name, function)


_register_inline_bodies()


def run_logged(task_name: str, kwargs: dict[str, Any]) -> Any:
    """Runs a task body; transient errors propagate (to be retried), permanent ones are logged."""
    try:
        return TASKS[task_name](**kwargs)
    except TRANSIENT_ERRORS:
        raise
    except Exception as exc:
        logs.failure(
            logger, "memproc: task %s failed permanently with %r; not retried", task_name, kwargs, exc=exc
        )
        return None


# --- Celery tasks -----------------------------------------------------------------------------------

try:
    from celery import shared_task
except ImportError:  # Celery is an optional extra; inline mode needs only TASKS.
    shared_task = None


def _celery_task(task_name: str) -> Any:
    """The Celery task for `task_name`: its plain body through `run_logged`, with the body's own
    signature (Celery checks a call's arguments against it before the task is sent or run)."""
    body = TASKS[task_name]

    def task(*args: Any, **kwargs: Any) -> Any:
        bound = inspect.signature(body).bind(*args, **kwargs)
        return run_logged(task_name, dict(bound.arguments))

    task.__name__ = task.__qualname__ = f"{body.__name__}_task"
    task.__module__ = __name__
    task.__doc__ = body.__doc__
    task.__signature__ = inspect.signature(body)  # type: ignore[attr-defined]
    return shared_task(name=task_name, **RETRY_OPTIONS)(task)


if shared_task is not None:
    embed_messages_task = _celery_task("memproc.embed_messages")
    generate_title_task = _celery_task("memproc.generate_title")
    backfill_embeddings_task = _celery_task("memproc.backfill_embeddings")
    purge_resource_task = _celery_task("memproc.purge_resource")
    purge_expired_task = _celery_task("memproc.purge_expired")
    outbox_dispatch_task = _celery_task("memproc.outbox_dispatch")
    compact_thread_task = _celery_task("memproc.compact_thread")
    index_merge_task = _celery_task("memproc.index_merge")
    build_index_task = _celery_task("memproc.build_index")
    expire_pending_tool_calls_task = _celery_task("memproc.expire_pending_tool_calls")
    resume_tool_call_task = _celery_task("memproc.resume_tool_call")
