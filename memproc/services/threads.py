"""Writes of threads: create, rename, archive, delete, clone and branch. Each service owns its transaction;
messages are written in memproc.services.messages."""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from memproc import models
from memproc.db import memproc_atomic, memproc_db
from memproc.exceptions import (
    ValidationError,
)
from memproc.messages import new_id
from memproc.models import message_key, thread_key
from memproc.selectors.messages import message_sequence
from memproc.selectors.threads import thread_get
from memproc.services.attachments import (
    attachments_release,
)
from memproc.signals import send_after_commit, thread_created, thread_deleted
from memproc.vectors import forget_cached
from memproc.vectors.base import EMBEDDING_COLUMNS


def resource_ensure(*, resource_id: str) -> models.Resource:
    resource, _ = models.Resource.objects.get_or_create(pk=resource_id)
    return resource


@memproc_atomic
def thread_create(
    *,
    resource_id: str,
    thread_id: str | None = None,
    title: str = "",
    metadata: dict[str, Any] | None = None,
    agent_id: str = "",
) -> models.Thread:
    """Creates a thread (and its resource if new). An id the resource already uses is a
    ValidationError; another resource's thread of the same id is no concern of this one's."""
    if not resource_id:
        raise ValidationError("A thread needs a resource_id")
    resource_ensure(resource_id=resource_id)
    thread_id = thread_id or new_id()
    try:
        with transaction.atomic(using=memproc_db()):
            thread = models.Thread.objects.create(
                public_id=thread_id,
                resource_id=resource_id,
                title=title,
                metadata=metadata or {},
                agent_id=agent_id,
            )
    except IntegrityError as exc:
        raise ValidationError(f"This resource already has a thread {thread_id!r}") from exc
    send_after_commit(
        thread_created,
        models.Thread,
        thread=thread,
        agent_id=agent_id,
        thread_id=thread.public_id,
        resource_id=resource_id,
    )
    return thread


def thread_ensure(*, thread_id: str, resource_id: str, agent_id: str = "") -> models.Thread:
    """The resource's thread `thread_id`, created on first use (and its resource). A thread that a
    concurrent request created meanwhile is read and returned; only the request that created it
    sends `thread_created`."""
    alias = memproc_db()
    models.Resource.objects.using(alias).bulk_create([models.Resource(pk=resource_id)], ignore_conflicts=True)
    try:
        with transaction.atomic(using=alias):
            thread = models.Thread.objects.using(alias).create(
                id=thread_key(resource_id, thread_id),
                public_id=thread_id,
                resource_id=resource_id,
                agent_id=agent_id,
            )
    except IntegrityError:
        existing = thread_get(thread_id=thread_id, resource_id=resource_id)
        if existing is None:  # refused for a reason other than a thread of that key
            raise ValidationError(f"Could not create thread {thread_id!r}") from None
        return existing
    send_after_commit(
        thread_created,
        models.Thread,
        thread=thread,
        agent_id=agent_id,
        thread_id=thread_id,
        resource_id=resource_id,
    )
    return thread


def thread_update(
    *, thread: models.Thread, title: str | None = None, metadata: dict[str, Any] | None = None
) -> models.Thread:
    fields = ["updated_at"]
    if title is not None:
        thread.title = title
        fields.append("title")
    if metadata is not None:
        thread.metadata = metadata
        fields.append("metadata")
    thread.updated_at = timezone.now()
    thread.save(update_fields=fields)
    return thread


def thread_archive(*, thread: models.Thread) -> models.Thread:
    """Archives a thread: it leaves the API's default thread list and other threads' recall, and
    keeps its messages; its own turns still run. Idempotent: an archived thread keeps the time it was
    first archived. `updated_at` is untouched, so unarchiving puts it back where it was."""
    if thread.archived_at is None:
        now = timezone.now()
        rows = models.Thread.objects.filter(pk=thread.pk, archived_at__isnull=True).update(archived_at=now)
        # Archived meanwhile by another request: that request's time stands.
        thread.archived_at = now if rows else models.Thread.objects.get(pk=thread.pk).archived_at
    return thread


def thread_unarchive(*, thread: models.Thread) -> models.Thread:
    """Brings an archived thread back (idempotent)."""
    models.Thread.objects.filter(pk=thread.pk).exclude(archived_at=None).update(archived_at=None)
    thread.archived_at = None
    return thread


@memproc_atomic
def thread_delete(*, thread: models.Thread) -> None:
    """Deletes a thread, its messages and embeddings, attachment files no other message uses, the
    answers kept for its turns' Idempotency-Keys (they hold its messages) and its suspended turns
    (they hold its unsaved input; a decision after the delete finds nothing to resume)."""
    attachments_release(message_keys=list(thread.messages.values_list("id", flat=True)))
    thread_id, resource_id, agent_id = thread.public_id, thread.resource_id, thread.agent_id
    models.IdempotencyRecord.objects.filter(resource_id=resource_id, thread_id=thread_id).delete()
    models.PendingToolCall.objects.filter(resource_id=resource_id, thread_id=thread_id).delete()
    thread.delete()
    forget_cached([resource_id], using=memproc_db())
    send_after_commit(
        thread_deleted, models.Thread, agent_id=agent_id, thread_id=thread_id, resource_id=resource_id
    )


@memproc_atomic
def thread_clone(
    *,
    thread: models.Thread,
    new_thread_id: str | None = None,
    title: str | None = None,
    up_to_message_id: str | None = None,
) -> models.Thread:
    """Copies a thread into a new thread of its resource: its messages (new ids, same order, same
    times), their embeddings (so recall works in the copy at once, with no embedder call) and its
    working memory (recorded as the copy's first revision).

    With `up_to_message_id` the copy is a branch: only the messages up to and including that one.
    A message that is not in `thread` is a ValidationError, and so is a taken `new_thread_id`.
    """
    source = thread.messages.order_by("sequence")
    if up_to_message_id is not None:
        cut = message_sequence(thread_key=thread.pk, message_id=up_to_message_id)
        if cut is None:
            raise ValidationError(f"Thread {thread.public_id!r} has no message {up_to_message_id!r}")
        source = source.filter(sequence__lte=cut)
    metadata = {**thread.metadata, "cloned_from": thread.public_id}
    if up_to_message_id is not None:
        metadata["branched_at"] = up_to_message_id
    default_title = (
        f"{'Branch' if up_to_message_id is not None else 'Clone'} of {thread.title or thread.public_id}"
    )
    clone = thread_create(
        resource_id=thread.resource_id,
        thread_id=new_thread_id,
        title=title if title is not None else default_title,
        metadata=metadata,
        agent_id=thread.agent_id,
    )
    id_map: dict[str, str] = {}  # the keys of the copied messages: theirs -> the copies'
    rows = []
    copied_sequences: list[int] = []
    for i, m in enumerate(source.iterator(), start=1):
        copy_id = new_id()
        id_map[m.pk] = message_key(clone.resource_id, copy_id)
        copied_sequences.append(m.sequence)
        rows.append(
            models.Message(
                id=id_map[m.pk],
                public_id=copy_id,
                thread=clone,
                resource_id=clone.resource_id,
                role=m.role,
                content=m.content,
                text=m.text,
                token_count=m.token_count,
                created_at=m.created_at,
                sequence=i,
            )
        )
    models.Message.objects.bulk_create(rows, batch_size=1000)
    _embeddings_copy(id_map=id_map, thread_id=clone.public_id, resource_id=clone.resource_id)
    models.Thread.objects.filter(pk=clone.pk).update(last_sequence=len(rows))
    clone.last_sequence = len(rows)
    if thread.working_memory:
        _working_memory_copy(clone=clone, text=thread.working_memory)
    _summary_copy(source=thread, clone=clone, copied_sequences=copied_sequences)
    return clone


def _summary_copy(*, source: models.Thread, clone: models.Thread, copied_sequences: list[int]) -> None:
    """The compaction summary goes with a copy that holds every message it covers (renumbered to the
    copy's sequences); a branch cut before its end does not get it, which would leak later content."""
    summary = models.ThreadSummary.objects.filter(thread=source).exclude(text="").first()
    if summary is None or not copied_sequences or copied_sequences[-1] < summary.covered_sequence:
        return
    models.ThreadSummary.objects.create(
        thread=clone,
        text=summary.text,
        covered_sequence=sum(1 for sequence in copied_sequences if sequence <= summary.covered_sequence),
        token_count=summary.token_count,
    )


def _embeddings_copy(*, id_map: dict[str, str], thread_id: str, resource_id: str) -> None:
    """Copies the embedding rows of the messages `id_map` names onto their copies."""
    kept = ("chunk", "model", "dimensions", "content_hash", "vector")
    now = timezone.now()
    rows = models.MessageEmbedding.objects.filter(message_id__in=list(id_map)).values("message_id", *kept)
    models.MessageEmbedding.objects.bulk_create(
        [
            models.MessageEmbedding(
                message_id=id_map[row["message_id"]],
                thread_id=thread_id,
                resource_id=resource_id,
                created_at=now,
                **{name: row[name] for name in kept},
            )
            for row in rows.iterator(chunk_size=500)
        ],
        batch_size=500,
    )


EMBEDDING_COPY_COLUMNS = EMBEDDING_COLUMNS


def _working_memory_copy(*, clone: models.Thread, text: str) -> None:
    models.Thread.objects.filter(pk=clone.pk).update(working_memory=text, working_memory_version=1)
    models.WorkingMemoryRevision.objects.create(
        scope=models.WorkingMemoryRevision.Scope.THREAD,
        key=clone.pk,
        old="",
        new=text,
        version=1,
        source=models.WorkingMemoryRevision.Source.CODE,
        thread_id=clone.pk,
    )
    clone.working_memory, clone.working_memory_version = text, 1
