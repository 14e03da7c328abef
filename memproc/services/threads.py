"""Writes of threads and messages. Each service owns its transaction."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from memproc import models
from memproc.db import insert_rows
from memproc.exceptions import AttachmentError, ThreadOwnershipError, TripWire, ValidationError
from memproc.messages import Message, new_id
from memproc.processors.attachments import AttachmentUploader
from memproc.processors.base import ProcessorContext
from memproc.selectors import messages_existing, thread_owner
from memproc.services.attachments import (
    DjangoAttachmentStore,
    attachments_commit,
    attachments_discard,
    attachments_link,
    attachments_release,
)
from memproc.signals import messages_saved, send_after_commit, thread_created, thread_deleted


def resource_ensure(*, resource_id: str) -> models.Resource:
    resource, _ = models.Resource.objects.get_or_create(pk=resource_id)
    return resource


@transaction.atomic
def thread_create(
    *,
    resource_id: str,
    thread_id: str | None = None,
    title: str = "",
    metadata: dict[str, Any] | None = None,
    agent_id: str = "",
) -> models.Thread:
    """Creates a thread (and its resource if new). An existing id is a ValidationError."""
    if not resource_id:
        raise ValidationError("A thread needs a resource_id")
    resource_ensure(resource_id=resource_id)
    thread_id = thread_id or new_id()
    try:
        with transaction.atomic():
            thread = models.Thread.objects.create(
                id=thread_id, resource_id=resource_id, title=title, metadata=metadata or {}, agent_id=agent_id
            )
    except IntegrityError as exc:
        raise ValidationError(f"A thread with id {thread_id!r} already exists") from exc
    send_after_commit(
        thread_created,
        models.Thread,
        thread=thread,
        agent_id=agent_id,
        thread_id=thread.id,
        resource_id=resource_id,
    )
    return thread


def thread_ensure(*, thread_id: str, resource_id: str, agent_id: str = "") -> models.Thread:
    """The thread, created on first use; a thread of another resource is refused."""
    thread = models.Thread.objects.filter(pk=thread_id).first()
    if thread is None:
        resource_ensure(resource_id=resource_id)
        try:
            with transaction.atomic():
                thread = models.Thread.objects.create(
                    id=thread_id, resource_id=resource_id, agent_id=agent_id
                )
            send_after_commit(
                thread_created,
                models.Thread,
                thread=thread,
                agent_id=agent_id,
                thread_id=thread_id,
                resource_id=resource_id,
            )
            return thread
        except IntegrityError:  # created concurrently
            thread = models.Thread.objects.get(pk=thread_id)
    check_owner(thread_id=thread_id, owner=thread.resource_id, resource_id=resource_id)
    return thread


def check_owner(*, thread_id: str, owner: str, resource_id: str) -> None:
    if owner != resource_id:
        raise ThreadOwnershipError(f"Thread {thread_id!r} belongs to another resource")


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


@transaction.atomic
def thread_delete(*, thread: models.Thread) -> None:
    """Deletes a thread, its messages and embeddings, and attachment files no other message uses."""
    attachments_release(message_ids=list(thread.messages.values_list("id", flat=True)))
    thread_id, resource_id, agent_id = thread.id, thread.resource_id, thread.agent_id
    thread.delete()
    send_after_commit(
        thread_deleted, models.Thread, agent_id=agent_id, thread_id=thread_id, resource_id=resource_id
    )


@transaction.atomic
def thread_clone(
    *, thread: models.Thread, new_thread_id: str | None = None, title: str | None = None
) -> models.Thread:
    """Copies a thread and its messages (new message ids, same order) into a new thread."""
    clone = thread_create(
        resource_id=thread.resource_id,
        thread_id=new_thread_id,
        title=title if title is not None else f"Clone of {thread.title or thread.id}",
        metadata={**thread.metadata, "cloned_from": thread.id},
        agent_id=thread.agent_id,
    )
    rows = [
        models.Message(
            id=new_id(),
            thread=clone,
            resource_id=clone.resource_id,
            role=m.role,
            content=m.content,
            text=m.text,
            token_count=m.token_count,
            created_at=m.created_at,
            sequence=i,
        )
        for i, m in enumerate(thread.messages.order_by("sequence"), start=1)
    ]
    models.Message.objects.bulk_create(rows)
    models.Thread.objects.filter(pk=clone.pk).update(last_sequence=len(rows))
    clone.last_sequence = len(rows)
    return clone


def sequences_allocate(*, thread_id: str, count: int) -> int:
    """Reserves `count` sequence numbers for a thread; returns the first. One locking UPDATE.

    The UPDATE takes the thread's row lock (PostgreSQL) or the database write lock (SQLite) until the
    surrounding transaction ends, so concurrent turns on one thread never interleave.
    """
    table = models.Thread._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET last_sequence = last_sequence + %s, updated_at = %s "
            f"WHERE id = %s RETURNING last_sequence",
            [count, timezone.now(), thread_id],
        )
        row = cursor.fetchone()
    if row is None:
        raise ValidationError(f"Thread {thread_id!r} does not exist")
    return int(row[0]) - count + 1


MESSAGE_COLUMNS = (
    "id",
    "thread",
    "resource_id",
    "role",
    "content",
    "text",
    "token_count",
    "created_at",
    "sequence",
)


def messages_insert(
    *, thread_id: str, resource_id: str, messages: Sequence[Message], agent_id: str = ""
) -> None:
    """Appends messages to an existing thread, in order: one sequence UPDATE and one INSERT.

    Call inside a transaction: the UPDATE's lock keeps concurrent turns from interleaving.
    """
    if not messages:
        return
    first = sequences_allocate(thread_id=thread_id, count=len(messages))
    now = timezone.now()
    rows = []
    for offset, message in enumerate(messages):
        if message.role == "system":
            raise ValidationError("System messages are never saved")
        rows.append(
            {
                "id": message.id,
                "thread": thread_id,
                "resource_id": resource_id,
                "role": message.role,
                "content": message.to_content(),
                "text": message.text,
                "token_count": message.metadata.get("token_count"),
                "created_at": message.created_at or now + timedelta(microseconds=offset),
                "sequence": first + offset,
            }
        )
    insert_rows(models.Message, rows, fields=MESSAGE_COLUMNS)
    send_after_commit(
        messages_saved,
        models.Message,
        messages=list(messages),
        agent_id=agent_id,
        thread_id=thread_id,
        resource_id=resource_id,
    )


@transaction.atomic(savepoint=False)  # inside a caller's transaction a failure aborts it whole anyway
def messages_save(
    *,
    thread_id: str,
    resource_id: str,
    messages: Sequence[Message],
    agent_id: str = "",
    thread_exists: bool = False,
    skip_existing: bool = True,
) -> list[Message]:
    """Saves messages at the end of a thread, in order, together; returns those it saved. Ids already
    stored in this thread are skipped; an id stored in another thread is a ValidationError."""
    if not thread_exists:
        owner = thread_owner(thread_id=thread_id)  # plain SQL: the ORM compiler costs more than the read
        if owner is None:
            thread_ensure(thread_id=thread_id, resource_id=resource_id, agent_id=agent_id)
        else:
            check_owner(thread_id=thread_id, owner=owner[0], resource_id=resource_id)
    messages = [m for m in messages if m.role != "system"]
    if skip_existing and messages:
        stored = messages_existing(ids=[m.id for m in messages])
        clash = [mid for mid, tid in stored.items() if tid != thread_id]
        if clash:
            raise ValidationError(f"Message ids already used by another thread: {', '.join(clash)}")
        messages = [m for m in messages if m.id not in stored]
    messages_insert(thread_id=thread_id, resource_id=resource_id, messages=messages, agent_id=agent_id)
    return messages


@transaction.atomic
def messages_delete(*, message_ids: Sequence[str], thread_id: str | None = None) -> int:
    """Deletes messages (and their embeddings); attachment files no other message uses go too."""
    qs = models.Message.objects.filter(id__in=list(message_ids))
    if thread_id is not None:
        qs = qs.filter(thread_id=thread_id)
    ids = list(qs.values_list("id", flat=True))
    attachments_release(message_ids=ids)
    deleted, _ = models.Message.objects.filter(id__in=ids).delete()
    return deleted


def messages_save_with_files(
    *, thread_id: str, resource_id: str, messages: Sequence[Message]
) -> list[Message]:
    """`messages_save` for messages that may carry inline files: the files are checked and stored
    like a turn's (AttachmentUploader), the rows written with the messages, references linked.
    A refused file raises AttachmentError and nothing is saved."""
    uploader = AttachmentUploader(storage=DjangoAttachmentStore())
    ctx = ProcessorContext(processor_id=uploader.id, messages=tuple(messages), resource_id=resource_id)
    try:
        offloaded = uploader.process_input(ctx)
    except TripWire as exc:
        raise AttachmentError(exc.reason, code=exc.metadata.get("code"), metadata=exc.metadata) from exc
    staged = ctx.state.get("staged", [])
    try:
        with transaction.atomic():
            values = attachments_commit(staged=staged, messages=offloaded or list(messages))
            saved = messages_save(thread_id=thread_id, resource_id=resource_id, messages=values)
            attachments_link(resource_id=resource_id, messages=saved)
    except BaseException:
        attachments_discard(staged=staged)
        raise
    return saved
