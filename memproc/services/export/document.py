"""Writing the export document of a resource: as a dict, or as JSON text piece by piece."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import QuerySet
from django.utils import timezone

from memproc import logs, models
from memproc.models import public_message_id, public_thread_id
from memproc.selectors.export import resource_rows
from memproc.selectors.threads import pinned_names
from memproc.services.attachments import attachment_url

logger = logging.getLogger(__name__)

FORMAT = "memproc.export"
VERSION = 1
VOLATILE = ("exported_at", "attachments[].url")
ARCHIVE_DOCUMENT = "export.json"

UrlFor = Callable[[models.Attachment], "str | None"]


def resource_export(
    *, resource_id: str, url_for: UrlFor | None = None, operator_data: bool = True
) -> dict[str, Any]:
    """The export document of a resource as a dict (JSON-ready). Nothing stored: LookupError.

    `url_for` gives an attachment's download URL (default: the storage's, signed on S3). Without
    `operator_data` (the copy an owner downloads) the document leaves out what operators keep about
    the resource: the tripwire logs (the review queue, DESIGN §5) and who edited working memory
    (`actor` is null); such a copy still imports, without them."""
    return {
        key: list(value) if isinstance(value, Iterator) else value
        for key, value in _sections(resource_id, url_for or storage_url, operator_data)
    }


def resource_export_chunks(
    *, resource_id: str, url_for: UrlFor | None = None, operator_data: bool = True
) -> Iterator[str]:
    """The same document as JSON text, piece by piece (for a streamed response or a file): rows are
    read with server-side cursors and written as they come, messages a thread at a time. Nothing
    stored: LookupError, raised by this call, before any piece."""
    sections = _sections(resource_id, url_for or storage_url, operator_data)
    first = next(sections)  # reads the resource row: a missing one raises now
    return _json_pieces(first, sections)


def _json_pieces(first: tuple[str, Any], rest: Iterator[tuple[str, Any]]) -> Iterator[str]:
    yield "{"
    for index, (key, value) in enumerate(_chain(first, rest)):
        yield ("," if index else "") + json.dumps(key) + ":"
        if isinstance(value, Iterator):
            yield "["
            for position, item in enumerate(value):
                yield ("," if position else "") + json.dumps(item)
            yield "]"
        else:
            yield json.dumps(value)
    yield "}"


def _chain(first: tuple[str, Any], rest: Iterator[tuple[str, Any]]) -> Iterator[tuple[str, Any]]:
    yield first
    yield from rest


def _sections(resource_id: str, url_for: UrlFor, operator_data: bool) -> Iterator[tuple[str, Any]]:
    rows = resource_rows(resource_id=resource_id)
    resource = rows["resource"].first()
    if resource is None:
        raise LookupError(f"Nothing is stored for resource {resource_id!r}")
    users = _usernames() if operator_data else (lambda pk: None)
    yield "format", FORMAT
    yield "version", VERSION
    yield "exported_at", iso(timezone.now())
    yield "resource", _resource(resource)
    yield "threads", _threads(rows["threads"])
    revisions = rows["working_memory_revisions"].order_by("created_at", "pk")
    yield "working_memory_revisions", (_revision(r, users) for r in revisions.iterator())
    yield "turn_records", (_turn(r) for r in rows["turn_records"].order_by("started_at", "pk").iterator())
    tripwires = (
        rows["tripwire_logs"].order_by("created_at", "pk") if operator_data else rows["tripwire_logs"].none()
    )
    yield "tripwire_logs", (_tripwire(r, users) for r in tripwires.iterator())
    pending = models.PendingToolCall.objects.filter(resource_id=resource.pk).order_by("created_at", "pk")
    yield "pending_tool_calls", (_pending(r, users) for r in pending.iterator())
    attachments = rows["attachments"].order_by("created_at", "pk")
    yield "attachments", (_attachment(a, url_for) for a in attachments.iterator())


def _threads(threads: QuerySet[models.Thread]) -> Iterator[dict[str, Any]]:
    """Threads in key order, each with its messages: two queries, merged as they stream. Both are
    sorted by the same column type in the database, so the groups come in the threads' order."""
    messages = (
        models.Message.objects.filter(thread__in=threads.values("id"))
        .order_by("thread_id", "sequence")
        .iterator(chunk_size=1000)
    )
    groups = _grouped(messages)
    pending = next(groups, None)
    for thread in threads.order_by("id").select_related("summary").iterator():
        own: list[dict[str, Any]] = []
        if pending is not None and pending[0] == thread.pk:
            own = pending[1]
            pending = next(groups, None)
        yield {**_thread(thread), "messages": own}


def _grouped(messages: Iterator[models.Message]) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    current: str | None = None
    batch: list[dict[str, Any]] = []
    for message in messages:
        if message.thread_id != current and batch:
            yield current, batch  # type: ignore[misc]
            batch = []
        current = message.thread_id
        batch.append(_message(message))
    if batch:
        yield current, batch  # type: ignore[misc]


def _resource(r: models.Resource) -> dict[str, Any]:
    return {
        "id": r.pk,
        "metadata": r.metadata,
        "working_memory": r.working_memory,
        "working_memory_version": r.working_memory_version,
        "pinned_fields": list(pinned_names(r.pinned_fields)),
        "created_at": iso(r.created_at),
        "updated_at": iso(r.updated_at),
    }


def _summary(t: models.Thread) -> dict[str, Any] | None:
    """The compaction summary (`Memory(compaction=...)`), if the thread has one with text."""
    try:
        summary = t.summary
    except models.ThreadSummary.DoesNotExist:
        return None
    if not summary.text:
        return None
    return {
        "text": summary.text,
        "covered_sequence": summary.covered_sequence,
        "token_count": summary.token_count,
    }


def _thread(t: models.Thread) -> dict[str, Any]:
    # The thread id callers know, as in every document before keys existed: the key says which
    # resource, and an import may bring the thread to another database's same-named resource.
    return {
        "id": t.public_id,
        "summary": _summary(t),
        "title": t.title,
        "agent_id": t.agent_id,
        "metadata": t.metadata,
        "working_memory": t.working_memory,
        "working_memory_version": t.working_memory_version,
        "last_sequence": t.last_sequence,
        "created_at": iso(t.created_at),
        "updated_at": iso(t.updated_at),
        "archived_at": iso(t.archived_at),
    }


def _message(m: models.Message) -> dict[str, Any]:
    return {
        "id": m.public_id,
        "role": m.role,
        "content": m.content,
        "text": m.text,
        "token_count": m.token_count,
        "created_at": iso(m.created_at),
        "sequence": m.sequence,
        "recall_excluded": m.recall_excluded,
    }


def _revision(r: models.WorkingMemoryRevision, users: Callable[[Any], str | None]) -> dict[str, Any]:
    """Thread keys are written as thread ids (the document's resource owns the thread)."""
    thread_scoped = r.scope == models.WorkingMemoryRevision.Scope.THREAD
    return {
        "id": str(r.pk),
        "scope": r.scope,
        "key": public_thread_id(r.key) if thread_scoped else r.key,
        "old": r.old,
        "new": r.new,
        "version": r.version,
        "source": r.source,
        "actor": users(r.actor_id),
        "thread_id": public_thread_id(r.thread_id),
        "turn_id": str(r.turn_id) if r.turn_id else None,
        "message_ids": [public_message_id(k) for k in r.message_ids or []],
        "created_at": iso(r.created_at),
    }


def _turn(r: models.TurnRecord) -> dict[str, Any]:
    return {
        "id": str(r.pk),
        "agent_id": r.agent_id,
        "thread_id": r.thread_id,
        "resource_id": r.resource_id,
        "status": r.status,
        "model": r.model,
        "steps": r.steps,
        "usage": r.usage,
        "manifest": r.manifest,
        "message_ids": r.message_ids,
        "tripwire_id": str(r.tripwire_id) if r.tripwire_id else None,
        "error": r.error,
        "started_at": iso(r.started_at),
        "duration_ms": r.duration_ms,
    }


def _tripwire(r: models.TripwireLog, users: Callable[[Any], str | None]) -> dict[str, Any]:
    return {
        "id": str(r.pk),
        "agent_id": r.agent_id,
        "processor_id": r.processor_id,
        "phase": r.phase,
        "reason": r.reason,
        "retry": r.retry,
        "metadata": r.metadata,
        "thread_id": r.thread_id,
        "resource_id": r.resource_id,
        "content": r.content,
        "status": r.status,
        "reviewed_by": users(r.reviewed_by_id),
        "reviewed_at": iso(r.reviewed_at),
        "note": r.note,
        "created_at": iso(r.created_at),
    }


def _pending(r: models.PendingToolCall, users: Callable[[Any], str | None]) -> dict[str, Any]:
    """A suspended turn, whatever its state: its `turn` holds the owner's unsaved input. An import
    brings it back as it was (a pending one can then be decided where it was imported)."""
    return {
        "id": str(r.pk),
        "agent_id": r.agent_id,
        "thread_id": r.thread_id,
        "kind": r.kind,
        "state": r.state,
        "tool_name": r.tool_name,
        "tool_call_id": r.tool_call_id,
        "arguments": r.arguments,
        "edited_arguments": r.edited_arguments,
        "turn": r.turn,
        "result": r.result,
        "result_is_error": r.result_is_error,
        "decided_by": users(r.decided_by_id),
        "decided_at": iso(r.decided_at),
        "reason": r.reason,
        "created_at": iso(r.created_at),
        "expires_at": iso(r.expires_at),
        "completed_at": iso(r.completed_at),
    }


def _attachment(a: models.Attachment, url_for: UrlFor) -> dict[str, Any]:
    return {
        "id": str(a.pk),
        "message_id": public_message_id(a.message_id) if a.message_id else None,
        "name": a.name,
        "content_type": a.content_type,
        "size": a.size,
        "sha256": a.sha256,
        "file": a.file.name,
        "created_at": iso(a.created_at),
        "url": url_for(a) if a.file else None,
    }


def storage_url(attachment: models.Attachment) -> str | None:
    """The storage's URL of the file; None (logged) when the storage cannot give one."""
    try:
        return attachment_url(attachment=attachment)
    except Exception as exc:  # a storage that is down must not fail the export of everything else
        logs.failure(
            logger, "memproc: no URL for attachment %s", attachment.pk, exc=exc, level=logging.WARNING
        )
        return None


def _usernames() -> Callable[[Any], str | None]:
    """A user pk -> username lookup: one query per distinct user."""
    cache: dict[Any, str | None] = {}
    User = get_user_model()

    def name(pk: Any) -> str | None:
        if pk is None:
            return None
        if pk not in cache:
            user = User._default_manager.filter(pk=pk).first()
            cache[pk] = user.get_username() if user is not None else None
        return cache[pk]

    return name


def iso(value: datetime | None) -> str | None:
    return None if value is None else value.astimezone(UTC).isoformat()
