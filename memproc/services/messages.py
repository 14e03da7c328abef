"""Writes of messages: appended in order under the thread's lock, checked for ids in use, deleted,
edited. Each service owns its transaction; threads are created in memproc.services.threads."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from datetime import timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F, TextField
from django.db.models.functions import Cast
from django.utils import timezone

from memproc import models
from memproc.db import memproc_atomic, memproc_db
from memproc.exceptions import (
    AttachmentError,
    MessageConflict,
    TripWire,
    ValidationError,
)
from memproc.messages import FilePart, Message, message_from_content
from memproc.models import message_key, message_keys, public_thread_id, split_thread_key, thread_key
from memproc.processors.attachments import AttachmentUploader
from memproc.processors.base import ProcessorContext
from memproc.processors.tokens import get_token_counter
from memproc.selectors.messages import message_keys_named, messages_existing_rows
from memproc.selectors.threads import thread_owner
from memproc.services.attachments import (
    DjangoAttachmentStore,
    attachment_delete,
    attachments_commit,
    attachments_discard,
    attachments_link,
    attachments_release,
)
from memproc.services.attachments.files import parse_uuid
from memproc.services.threads import thread_ensure
from memproc.signals import messages_saved, send_after_commit
from memproc.vectors import forget_cached


def sequences_allocate(*, thread_key: str, count: int, using: str, expected: int | None = None) -> int:
    """Reserves `count` sequence numbers for a thread; returns the first.

    The UPDATE takes the thread's row lock (PostgreSQL) or the database write lock (SQLite) until the
    surrounding transaction ends, so concurrent turns on one thread never interleave. With `expected`,
    the last sequence the caller read (a turn, at its start), one UPDATE swaps it for the new one;
    when another writer moved it meanwhile, the sequence is bumped and read back.
    """
    now = timezone.now()
    threads = models.Thread.objects.using(using)
    if expected is not None and threads.filter(pk=thread_key, last_sequence=expected).update(
        last_sequence=expected + count, updated_at=now
    ):
        return expected + 1
    threads = threads.filter(pk=thread_key)
    if not threads.update(last_sequence=F("last_sequence") + count, updated_at=now):
        raise ValidationError(f"Thread {public_thread_id(thread_key)!r} does not exist")
    return threads.values_list("last_sequence", flat=True).get() - count + 1


def messages_insert(
    *,
    thread_id: str,
    resource_id: str,
    messages: Sequence[Message],
    agent_id: str = "",
    last_sequence: int | None = None,
) -> None:
    """Appends messages to an existing thread, in order, with the ORM: one sequence UPDATE (which
    holds the thread's lock until the transaction ends), its read unless `last_sequence` (the value
    the caller read) still holds, and one bulk INSERT."""
    if not messages:
        return
    if any(m.role == "system" for m in messages):
        raise ValidationError("System messages are never saved")
    key = thread_key(resource_id, thread_id)
    using = memproc_db()
    # Inside a caller's transaction a failure aborts it whole anyway: no savepoint of our own.
    with transaction.atomic(using=using, savepoint=False):
        first = sequences_allocate(thread_key=key, count=len(messages), using=using, expected=last_sequence)
        now = timezone.now()
        rows = [
            models.Message(
                id=message_key(resource_id, message.id),
                public_id=message.id,
                thread_id=key,
                resource_id=resource_id,
                role=message.role,
                content=message.to_content(),
                text=message.text,
                token_count=message.metadata.get("token_count"),
                created_at=message.created_at or now + timedelta(microseconds=offset),
                sequence=first + offset,
            )
            for offset, message in enumerate(messages)
        ]
        try:  # no savepoint: a clash ends the transaction, which the caller then rolls back
            models.Message.objects.using(using).bulk_create(rows)
        except IntegrityError as exc:
            # The sequence numbers are ours (the UPDATE above holds the thread's lock), so a clash is
            # a message id that a concurrent request saved first. The caller's transaction rolls
            # back: nothing of the request is saved.
            raise MessageConflict(
                "A message id of this request was saved by another request meanwhile; nothing was saved."
            ) from exc
    send_after_commit(
        messages_saved,
        models.Message,
        messages=list(messages),
        agent_id=agent_id,
        thread_id=thread_id,
        resource_id=resource_id,
    )


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
    stored in this thread are skipped; an id stored in another thread is a MessageConflict (a
    ValidationError), and so is one that a concurrent request saves first."""
    key = thread_key(resource_id, thread_id)
    messages = [m for m in messages if m.role != "system"]
    ids = [m.id for m in messages] if skip_existing else []
    # No savepoint: inside a caller's transaction a failure aborts it whole anyway.
    with transaction.atomic(using=memproc_db(), savepoint=False):
        if not thread_exists and thread_owner(thread_key=key) is None:
            thread_ensure(thread_id=thread_id, resource_id=resource_id, agent_id=agent_id)
        if ids:
            stored = message_ids_check(resource_id=resource_id, thread_key=key, messages=messages)
            messages = [m for m in messages if m.id not in stored]
        messages_insert(thread_id=thread_id, resource_id=resource_id, messages=messages, agent_id=agent_id)
    return messages


def message_ids_check(
    *,
    resource_id: str,
    thread_key: str | None,
    messages: Sequence[Message],
    unchanged: Collection[str] = (),
    rows: Iterable[tuple[str, str]] | None = None,
) -> set[str]:
    """The ids of `messages` already stored in `resource_id`'s thread `thread_key` (None: a thread not
    created yet). One query; none without messages, or with the (id, thread key) `rows` of those
    stored, read already (not with `unchanged`, which needs the stored content).

    Ids name messages within their resource: another resource's messages are never looked at, so
    nothing here tells a caller what others stored. An id stored in another thread of the same
    resource is a MessageConflict, and so is an id in `unchanged` stored here with another role or
    text (or other tool call ids)."""
    by_id = {m.id: m for m in messages}
    if not by_id:
        return set()
    here: set[str] = set()
    clash: list[str] = []
    found: Iterable[Sequence[Any]]
    if unchanged:
        columns = ("public_id", "thread_id", "role", "text", "content")
        keys = message_keys(resource_id, by_id)
        found = models.Message.objects.filter(id__in=keys).values_list(*columns)
    elif rows is not None:
        found = rows
    else:
        found = messages_existing_rows(resource_id=resource_id, ids=by_id)
    for row in found:
        message_id, stored_thread = row[0], row[1]
        if stored_thread != thread_key or (
            message_id in unchanged and not _same_message(by_id[message_id], *row[2:])
        ):
            clash.append(message_id)
        else:
            here.add(message_id)
    if clash:
        raise MessageConflict.in_use(clash)
    return here


def input_ids_check(
    *, resource_id: str, thread_key: str | None, messages: Sequence[Message], client_ids: Collection[str]
) -> None:
    """A turn's input as a client sends it, checked before the turn runs (the HTTP API does).

    Messages before the input's last assistant message are the client's copy of the conversation:
    stored ones are history, and the stored copy wins (rule 11). What follows is the turn's new input:
    an id of it that is stored with other content, or any client-chosen id stored in another
    thread, is a MessageConflict. Only ids the client chose are looked up (none: no query)."""
    chosen = [m for m in messages if m.id in client_ids]
    if not chosen:
        return
    last_answer = max((i for i, m in enumerate(messages) if m.role == "assistant"), default=-1)
    new = {m.id for m in messages[last_answer + 1 :]}
    message_ids_check(
        resource_id=resource_id, thread_key=thread_key, messages=chosen, unchanged=new & set(client_ids)
    )


def _same_message(message: Message, role: str, text: str, content: Any) -> bool:
    """The comparison of rule 17: role, text (outer whitespace aside) and tool call ids."""
    parts = (content or {}).get("parts", []) if isinstance(content, dict) else []

    def ids(kind: str) -> list[Any]:
        return [p.get("tool_call_id") for p in parts if isinstance(p, dict) and p.get("type") == kind]

    return (
        message.role == role
        and message.text.strip() == (text or "").strip()
        and [c.tool_call_id for c in message.tool_calls] == ids("tool-call")
        and [r.tool_call_id for r in message.tool_results] == ids("tool-result")
    )


@memproc_atomic
def messages_delete(*, message_keys: Sequence[str], thread_key: str | None = None) -> int:
    """Deletes messages by their keys (and their embeddings); attachment files no other message
    uses go too."""
    qs = models.Message.objects.filter(id__in=list(message_keys))
    if thread_key is not None:
        qs = qs.filter(thread_id=thread_key)
    found = list(qs.values_list("id", "thread_id", "sequence", "resource_id"))
    ids = [row[0] for row in found]
    attachments_release(message_keys=ids)
    summaries_forget([row[:3] for row in found])
    _, by_model = models.Message.objects.filter(id__in=ids).delete()
    forget_cached({row[3] for row in found}, using=memproc_db())
    return by_model.get(models.Message._meta.label, 0)  # not the embeddings that went with them


def summaries_forget(rows: Sequence[tuple[str, str, int]]) -> None:
    """A compaction summary that covers a deleted or quarantined message (rows of (message id, thread
    key, sequence)) still says what it said: it goes, with its revisions, and the thread's next fold
    starts over from the messages that remain (folds skip quarantined ones)."""
    first_deleted: dict[str, int] = {}
    for _, thread_id, sequence in rows:
        first_deleted[thread_id] = min(sequence, first_deleted.get(thread_id, sequence))
    if not first_deleted:
        return
    covering = [
        thread_id
        for thread_id, covered in models.ThreadSummary.objects.filter(
            thread_id__in=list(first_deleted)
        ).values_list("thread_id", "covered_sequence")
        if covered >= first_deleted[thread_id]
    ]
    if covering:
        models.SummaryRevision.objects.filter(thread_id__in=covering).delete()
        models.ThreadSummary.objects.filter(thread_id__in=covering).delete()


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
        with transaction.atomic(using=memproc_db(), savepoint=False):  # a part of the caller's
            values = attachments_commit(staged=staged, messages=offloaded or list(messages))
            saved = messages_save(thread_id=thread_id, resource_id=resource_id, messages=values)
            attachments_link(resource_id=resource_id, messages=saved)
    except BaseException:
        attachments_discard(staged=staged)
        raise
    return saved


@memproc_atomic
def messages_update(
    *, messages: Sequence[Message], resource_id: str | None = None, thread_key: str | None = None
) -> tuple[list[Message], list[str]]:
    """Replaces the content (parts and metadata) of stored messages of `resource_id` (or of the
    thread `thread_key`; with neither, see `message_keys_named`); id, role, thread, time and
    sequence stay. Returns the updated messages and the keys of those whose embeddings were deleted.

    `text` follows the new parts and `token_count` is counted again (the TOKENIZER setting) when the
    row had one, so neither describes the old content. The old embeddings go in the same transaction;
    the caller embeds the new text after commit. An attachment a message no longer references is
    released (row now, file after commit) unless another message references it; one it newly
    references is linked.

    Refused with a ValidationError, nothing changed: an id that is not stored (or not in
    `thread_key`), the same id twice, another role, other tool calls or results than the stored
    message holds (their pairing is the conversation's), an inline file (`save_messages` offloads
    those), a reference to an attachment the message's resource does not hold.
    """
    by_id = {m.id: m for m in messages}
    if len(by_id) != len(messages):
        raise ValidationError("Each message may be updated once per call")
    if resource_id is None and thread_key is not None:
        resource_id = split_thread_key(thread_key)[0]
    keys = message_keys_named(ids=by_id, resource_id=resource_id)
    rows = {r.public_id: r for r in models.Message.objects.select_for_update().filter(id__in=keys)}
    missing = [i for i in by_id if i not in rows or thread_key not in (None, rows[i].thread_id)]
    if missing:
        raise ValidationError(f"No stored message with id {', '.join(map(repr, sorted(missing)))}")
    for message in by_id.values():
        _check_edit(rows[message.id], message)
    counter = get_token_counter() if any(r.token_count is not None for r in rows.values()) else None
    updated: list[Message] = []
    for message in by_id.values():
        row = rows[message.id]
        before = _attachment_ids(row.content)
        row.content = message.to_content()
        row.text = message.text
        if row.token_count is not None and counter is not None:
            row.token_count = counter.count_message(message)
        saved = message_from_content(
            id=row.public_id,
            role=row.role,
            content=row.content,
            created_at=row.created_at,
            thread_id=public_thread_id(row.thread_id),
            resource_id=row.resource_id,
            sequence=row.sequence,
        )
        updated.append(saved)
        _attachments_unreferenced(row, before - _attachment_ids(row.content))
        attachments_link(resource_id=row.resource_id, messages=[saved])
    models.Message.objects.bulk_update(list(rows.values()), ["content", "text", "token_count"])
    embeddings = models.MessageEmbedding.objects.filter(message_id__in=[r.pk for r in rows.values()])
    dropped = sorted(set(embeddings.values_list("message_id", flat=True)))
    if dropped:
        embeddings.delete()
        forget_cached({row.resource_id for row in rows.values()}, using=memproc_db())
    return updated, dropped


def _check_edit(row: models.Message, message: Message) -> None:
    if message.role != row.role:
        raise ValidationError(f"Message {row.public_id!r} is a {row.role} message; its role cannot change")
    stored = message_from_content(id=row.public_id, role=row.role, content=row.content or {})
    calls = ([c.tool_call_id for c in m.tool_calls] for m in (stored, message))
    results = ([r.tool_call_id for r in m.tool_results] for m in (stored, message))
    if len({tuple(ids) for ids in calls}) > 1 or len({tuple(ids) for ids in results}) > 1:
        raise ValidationError(
            f"Message {row.public_id!r}: an edit may change text, files and results, not which tool calls "
            "and results a message holds"
        )
    for part in message.parts:
        if isinstance(part, FilePart) and (
            part.data is not None or str(part.url or "")[:5].lower() == "data:"
        ):
            raise ValidationError(
                f"Message {row.public_id!r}: an edit cannot carry file bytes; save the file with "
                "save_messages and reference its attachment"
            )
    wanted = {parse_uuid(i) for i in _attachment_ids(message.to_content())}
    known = set(
        models.Attachment.objects.filter(
            pk__in=[i for i in wanted if i], resource_id=row.resource_id
        ).values_list("pk", flat=True)
    )
    if wanted - known:
        raise ValidationError(f"Message {row.public_id!r} references attachments its resource does not hold")


def _attachment_ids(content: Any) -> set[str]:
    parts = content.get("parts", []) if isinstance(content, dict) else []
    return {
        str(p.get("attachment_id"))
        for p in parts
        if isinstance(p, dict) and p.get("type") == "attachment" and p.get("attachment_id")
    }


def _attachments_unreferenced(row: models.Message, dropped: set[str]) -> None:
    """Attachments linked to `row` whose references an edit removed: relinked to another message of
    the resource that references them, else deleted (their file after commit)."""
    ids = [i for i in (parse_uuid(a) for a in dropped) if i is not None]
    for attachment in models.Attachment.objects.filter(pk__in=ids, message_id=row.pk):
        other = (
            models.Message.objects.filter(resource_id=row.resource_id)
            .exclude(pk=row.pk)
            .annotate(content_text=Cast("content", TextField()))
            .filter(content_text__contains=str(attachment.pk))
            .values_list("pk", flat=True)
            .first()
        )
        if other is not None:
            models.Attachment.objects.filter(pk=attachment.pk).update(message_id=other)
        else:
            attachment_delete(attachment=attachment)
