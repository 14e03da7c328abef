"""A turn's writes: the atomic save (rule 9) and the save of a blocked turn.

What the save knows of the agent comes from the turn's TurnPlan (memproc.turns.plan); what it
writes, from the turn's write buffer (`Turn.writes`), including the work it schedules.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from memproc import background
from memproc.conf import settings
from memproc.db import atomic_write, memproc_db
from memproc.models import message_keys, thread_key
from memproc.processors.turn import Turn
from memproc.services.approvals import pending_complete
from memproc.services.attachments import attachments_commit, attachments_link
from memproc.services.compaction.job import compaction_enqueue
from memproc.services.messages import messages_delete, messages_insert
from memproc.services.recall import EmbeddingSource, embedding_rows, sources_for
from memproc.services.threads import thread_ensure
from memproc.services.titles import thread_title_generate, title_options
from memproc.services.tripwires import tripwire_log
from memproc.services.working_memory import working_memory_update
from memproc.turns.plan import TurnPlan
from memproc.turns.records import turn_record_alone, turn_record_insert
from memproc.vectors import EmbeddingRow, get_vector_store

__all__ = ["blocked_save", "turn_commit"]


def turn_commit(
    turn: Turn,
    *,
    plan: TurnPlan,
    record: dict[str, Any] | None = None,
    turn_id: uuid.UUID | None = None,
    resumed: Any = None,
) -> None:
    """Rule 9: the turn's messages, working-memory changes and record are saved together or not at
    all. Inline, the embeddings are computed before the transaction and written in it (one durable
    commit); with Celery, they are a task sent after commit, as titles and a due compaction fold are.
    A turn that saves nothing writes its record alone.

    Each working-memory revision names the turn (`turn_id`, its record's id) and the messages it saved:
    the lineage that lets forgetting a message take back what the model wrote from it.

    A turn `resumed` from a PendingToolCall completes it in the same transaction."""
    writes = turn.writes
    if not (writes.messages or writes.working_memory):
        if resumed is None:  # a turn without memory may run where there is no database at all
            if record is not None:
                turn_record_alone(**record)
            return
        with atomic_write(memproc_db()):
            if record is not None:
                turn_record_alone(**record)
            pending_complete(pending_id=resumed)
        return
    assert turn.thread_id and turn.resource_id
    key = thread_key(turn.resource_id, turn.thread_id)
    last_sequence = turn.thread_last_sequence if turn.thread_exists else 0
    embedding = _embedding(turn)  # before the transaction: no lock is held while the embedder runs
    with atomic_write(memproc_db()):
        if not turn.thread_exists:
            thread_ensure(thread_id=turn.thread_id, resource_id=turn.resource_id, agent_id=plan.agent_id)
            turn.thread_exists = True
            writes.generate_title = bool(plan.generate_title and not turn.thread_title)
        if turn.replaces and writes.messages:
            messages_delete(message_keys=message_keys(turn.resource_id, turn.replaces), thread_key=key)
        if writes.messages:
            writes.messages = attachments_commit(staged=turn.attachments, messages=writes.messages)
            messages_insert(
                thread_id=turn.thread_id,
                resource_id=turn.resource_id,
                messages=writes.messages,
                agent_id=plan.agent_id,
                last_sequence=last_sequence,
            )
            attachments_link(resource_id=turn.resource_id, messages=writes.messages)
        if record is not None:
            turn_record_insert(**record)
        if resumed is not None:
            pending_complete(pending_id=resumed)
        memory_now: tuple[str, int] | None = None  # the value the previous change left
        lineage = message_keys(turn.resource_id, [m.id for m in writes.messages])
        for wm in writes.working_memory:
            memory_now = working_memory_update(
                scope=wm.scope,
                key=key if wm.scope == "thread" else wm.key,
                value=wm.value,
                source="model",
                mode=wm.mode,
                template=wm.template,
                schema=wm.schema,
                thread_key=key,
                resource_id=turn.resource_id,
                agent_id=plan.agent_id,
                expected=wm.expected or memory_now,
                pinned=wm.pinned,
                turn_id=turn_id,
                message_ids=lineage,
            )
        if embedding is not None:
            _save_embedding(turn, embedding, agent_id=plan.agent_id)
        if writes.compaction is not None and writes.messages:
            # In the turn's transaction, so the outbox keeps it if the broker is down.
            compaction_enqueue(thread_key=key, agent_id=plan.agent_id, request=writes.compaction.as_dict())
        if writes.generate_title and writes.messages:
            _enqueue_title(turn, key, plan=plan)
    if writes.messages:
        turn.attachments = []  # committed (or deleted after commit): nothing left to discard


def _enqueue_title(turn: Turn, key: str, *, plan: TurnPlan) -> None:
    """Titles the new thread after commit. The job names the agent, and also carries the models as
    strings, so a worker titles threads of agents it has not registered (a model given as an object
    cannot travel: such an agent must be registered where the worker runs). Inline, the agent's own
    objects are used, registered or not."""
    options = title_options(generate_title=plan.generate_title, agent_model=plan.model)
    title_model = options["model"] if isinstance(options["model"], str) else None

    def title_now() -> None:
        thread_title_generate(thread_key=key, model=options["model"], instructions=options["instructions"])

    background.enqueue(
        "memproc.generate_title",
        kwargs={
            "thread_id": turn.thread_id,
            "resource_id": turn.resource_id,
            "agent_id": plan.agent_id,
            "agent_model": plan.model_name,
            "title_model": title_model,
            "instructions": options["instructions"],
        },
        inline=title_now,
    )


@dataclass(frozen=True)
class _Embedding:
    """What a turn's save writes of its embeddings: the rows computed before it (inline), or why they
    could not be (`failure`), or neither (BACKGROUND="celery": a worker embeds after commit)."""

    sources: list[EmbeddingSource]
    rows: list[EmbeddingRow] | None = None
    failure: Exception | None = None


def _embedding(turn: Turn) -> _Embedding | None:
    """The sources the save will store (only what it stores: a turn that keeps no history but writes
    working memory saves no message, and a vector needs its message row) and, inline, their vectors,
    the recall query's reused. An embedder failure is kept for the save to park, not raised."""
    writes = turn.writes
    saved = {m.id for m in writes.messages}
    embed = [m for m in writes.embed if m.id in saved]
    sources = sources_for(embed, thread_id=turn.thread_id or "", resource_id=turn.resource_id or "")
    if not sources:
        return None
    if settings.BACKGROUND == "celery":
        return _Embedding(sources)
    try:
        return _Embedding(
            sources, rows=embedding_rows(sources=sources, embedder=writes.embedder, known=writes.vectors)
        )
    except Exception as exc:  # the policy of an inline job that fails: logged, parked, retried later
        return _Embedding(sources, failure=exc)


def _save_embedding(turn: Turn, embedding: _Embedding, *, agent_id: str) -> None:
    """In the turn's transaction: the rows computed before it, or the job that embeds them later (a
    Celery task after commit, or an inline failure parked in the outbox with the turn)."""
    kwargs = {"message_ids": [s.message_id for s in embedding.sources], "agent_id": agent_id}
    if embedding.rows is not None:
        get_vector_store(turn.writes.vector_store).store(embedding.rows)
        background.inline_succeeded()
    elif embedding.failure is not None:
        background.park("memproc.embed_messages", kwargs=kwargs, exc=embedding.failure)
    else:
        background.enqueue("memproc.embed_messages", kwargs=kwargs)


def blocked_save(
    *, tripwire_fields: dict[str, Any], record: dict[str, Any] | None, resumed: Any = None
) -> None:
    """The tripwire log, then the turn's record pointing at it (each in its own transaction); a
    blocked turn `resumed` from a PendingToolCall completes it."""
    log = tripwire_log(**tripwire_fields)
    if record is not None:
        turn_record_alone(**record, tripwire_id=log.pk)
    if resumed is not None:
        pending_complete(pending_id=resumed)
