"""Checking an export document and turning it into unsaved rows. A bad value is a ValidationError
that names its place (`threads[2].messages[5].role: ...`); nothing is read from the database.

A document names threads by their thread id (within the document's resource), as every version-1
document has; the rows that hold thread keys get the key of (the document's resource, that id)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from memproc import models
from memproc.exceptions import AttachmentError, ValidationError
from memproc.messages import Message, message_from_content, part_errors
from memproc.models import message_key, message_keys, thread_key
from memproc.processors.attachment_checks import inline_files_check
from memproc.services.attachments import attachment_body_limit
from memproc.services.export.document import FORMAT, VERSION
from memproc.services.export.fields import (
    SEQUENCE_MAX,
    choice_at,
    dict_at,
    flag_at,
    id_at,
    integer_at,
    items_at,
    names_at,
    number_at,
    object_at,
    resource_id_at,
    storable,
    text_at,
    thread_id_at,
    thread_ref_at,
    time_at,
    uuid_at,
)

Revision = models.WorkingMemoryRevision
Log = models.TripwireLog


@dataclass
class Rows:
    """A document's rows. Users are still names (`actors`, `reviewers`: row id -> username) and
    attachments carry the storage name of their file in the exporting site (`files`)."""

    resource: models.Resource
    threads: list[models.Thread] = field(default_factory=list)
    messages: list[models.Message] = field(default_factory=list)
    revisions: list[models.WorkingMemoryRevision] = field(default_factory=list)
    turns: list[models.TurnRecord] = field(default_factory=list)
    tripwires: list[models.TripwireLog] = field(default_factory=list)
    attachments: list[models.Attachment] = field(default_factory=list)
    summaries: list[models.ThreadSummary] = field(default_factory=list)
    actors: dict[uuid.UUID, str] = field(default_factory=dict)
    reviewers: dict[uuid.UUID, str] = field(default_factory=dict)
    pending: list[models.PendingToolCall] = field(default_factory=list)
    deciders: dict[uuid.UUID, str] = field(default_factory=dict)
    files: dict[uuid.UUID, str] = field(default_factory=dict)


def document_rows(document: Mapping[str, Any]) -> Rows:
    if not isinstance(document, Mapping) or document.get("format") != FORMAT:
        raise ValidationError(f"Not a memproc export: 'format' is not {FORMAT!r}")
    if document.get("version") != VERSION:
        raise ValidationError(
            f"This memproc reads export version {VERSION}; the document is version "
            f"{document.get('version')!r}"
        )
    rows = Rows(resource=_resource(object_at(document, "resource", "resource")))
    for i, item in enumerate(items_at(document, "threads")):
        thread = _thread(item, f"threads[{i}]", rows.resource.pk)
        rows.threads.append(thread)
        if item.get("summary") is not None:
            rows.summaries.append(
                _summary(object_at(item, "summary", f"threads[{i}]"), f"threads[{i}].summary", thread)
            )
        for j, raw in enumerate(items_at(item, "messages", f"threads[{i}]")):
            message = _message(raw, f"threads[{i}].messages[{j}]", thread)
            rows.messages.append(message)
            # The thread's counter past its messages, or its next turn would take a used sequence.
            thread.last_sequence = max(thread.last_sequence, message.sequence)
    for i, item in enumerate(items_at(document, "working_memory_revisions")):
        revision = _revision(item, f"working_memory_revisions[{i}]", rows.resource.pk)
        rows.revisions.append(revision)
        if isinstance(item.get("actor"), str):
            rows.actors[revision.pk] = item["actor"]
    for i, item in enumerate(items_at(document, "turn_records")):
        rows.turns.append(_turn(item, f"turn_records[{i}]"))
    for i, item in enumerate(items_at(document, "tripwire_logs")):
        log = _tripwire(item, f"tripwire_logs[{i}]")
        rows.tripwires.append(log)
        if isinstance(item.get("reviewed_by"), str):
            rows.reviewers[log.pk] = item["reviewed_by"]
    for i, item in enumerate(items_at(document, "pending_tool_calls")):  # absent before approvals
        call = _pending(item, f"pending_tool_calls[{i}]", rows.resource.pk)
        rows.pending.append(call)
        if isinstance(item.get("decided_by"), str):
            rows.deciders[call.pk] = item["decided_by"]
    for i, item in enumerate(items_at(document, "attachments")):
        where = f"attachments[{i}]"
        attachment = _attachment(item, where, rows.resource.pk)
        rows.attachments.append(attachment)
        rows.files[attachment.pk] = text_at(item, "file", where)
    return rows


def _resource(data: Mapping[str, Any]) -> models.Resource:
    where = "resource"
    return models.Resource(
        id=resource_id_at(data, "id", where),
        metadata=dict_at(data, "metadata", where),
        working_memory=text_at(data, "working_memory", where),
        working_memory_version=integer_at(data, "working_memory_version", where),
        # Optional: documents written before the memory view have none.
        pinned_fields=names_at(data, "pinned_fields", where),
        created_at=time_at(data, "created_at", where),
        updated_at=time_at(data, "updated_at", where),
    )


def _thread(data: Mapping[str, Any], where: str, resource_id: str) -> models.Thread:
    """An unsaved thread with its key set (bulk_create does not run `Thread.save`)."""
    public_id = thread_id_at(data, "id", where)
    return models.Thread(
        id=thread_key(resource_id, public_id),
        public_id=public_id,
        resource_id=resource_id,
        title=text_at(data, "title", where)[:255],
        agent_id=text_at(data, "agent_id", where)[:255],
        metadata=dict_at(data, "metadata", where),
        working_memory=text_at(data, "working_memory", where),
        working_memory_version=integer_at(data, "working_memory_version", where),
        last_sequence=integer_at(data, "last_sequence", where, high=SEQUENCE_MAX),
        created_at=time_at(data, "created_at", where),
        updated_at=time_at(data, "updated_at", where),
        # Optional: documents written before threads could be archived have none.
        archived_at=time_at(data, "archived_at", where, optional=True),
    )


def _summary(data: Mapping[str, Any], where: str, thread: models.Thread) -> models.ThreadSummary:
    return models.ThreadSummary(
        thread_id=thread.pk,
        text=text_at(data, "text", where),
        covered_sequence=integer_at(data, "covered_sequence", where, high=SEQUENCE_MAX),
        token_count=integer_at(data, "token_count", where),
    )


def _message(data: Mapping[str, Any], where: str, thread: models.Thread) -> models.Message:
    """A message row, checked as the API checks a turn's messages (`_message_check`); `text` is
    computed from the content's parts, as a save computes it."""
    content = dict_at(data, "content", where)
    role = choice_at(data, "role", where, models.Message.Role.choices)
    if role == models.Message.Role.SYSTEM:
        raise ValidationError(
            f"{where}.role: system messages are never stored (an agent's instructions are its system "
            "prompt), so an export holds none"
        )
    value = _message_check(data, where, role, content)
    token_count = integer_at(data, "token_count", where, optional=True)
    return models.Message(
        id=message_key(thread.resource_id, value.id),
        public_id=value.id,
        thread_id=thread.pk,
        resource_id=thread.resource_id,
        role=role,
        content=content,
        text=value.text,
        token_count=token_count,
        created_at=time_at(data, "created_at", where),
        sequence=integer_at(data, "sequence", where, low=1, high=SEQUENCE_MAX),
        recall_excluded=flag_at(data, "recall_excluded", where),
    )


def _message_check(data: Mapping[str, Any], where: str, role: str, content: dict[str, Any]) -> Message:
    """The message's content as the API takes it: parts of the right shape, inline files within
    MAX_ATTACHMENT_BYTES, and no larger than the largest request the API reads."""
    if not isinstance(content.get("parts", []), list):
        raise ValidationError(f"{where}.content.parts: expected a list of parts")
    if not isinstance(content.get("metadata") or {}, dict):
        raise ValidationError(f"{where}.content.metadata: expected an object")
    try:
        value = message_from_content(id=id_at(data, "id", where), role=role, content=content)
    except (ValidationError, TypeError, ValueError) as exc:
        raise ValidationError(f"{where}.content: {exc}") from exc
    errors = [error for part in value.parts for error in part_errors(part)]
    if errors:
        raise ValidationError(f"{where}.content: {' '.join(errors[:5])}")
    try:
        inline_files_check([value])
    except AttachmentError as exc:
        raise ValidationError(f"{where}.content: {exc}") from exc
    size = len(json.dumps(content, ensure_ascii=False).encode("utf-8", "surrogatepass"))
    limit = attachment_body_limit()
    if size > limit:
        raise ValidationError(
            f"{where}.content: {size} bytes; the API takes a message of at most {limit} bytes "
            "(a file of MAX_ATTACHMENT_BYTES as base64, and the rest of a request)"
        )
    return value


def _revision(data: Mapping[str, Any], where: str, resource_id: str) -> models.WorkingMemoryRevision:
    """A revision names threads of the document's resource: its thread scope key and `thread_id`
    become that resource's thread keys."""
    scope = choice_at(data, "scope", where, Revision.Scope.choices)
    if scope == Revision.Scope.THREAD:
        key = thread_key(resource_id, thread_id_at(data, "key", where))
    else:
        key = id_at(data, "key", where)
    return Revision(
        id=uuid_at(data, "id", where),
        scope=scope,
        key=key,
        old=text_at(data, "old", where),
        new=text_at(data, "new", where),
        version=integer_at(data, "version", where),
        source=choice_at(data, "source", where, Revision.Source.choices),
        thread_id=thread_key(resource_id, thread_ref_at(data, "thread_id", where)),
        turn_id=uuid_at(data, "turn_id", where) if data.get("turn_id") else None,
        message_ids=message_keys(resource_id, _ids(data, "message_ids", where)),
        created_at=time_at(data, "created_at", where),
    )


def _ids(data: Mapping[str, Any], name: str, where: str) -> list[str]:
    """A list of message ids; absent in documents written before lineage was recorded."""
    value = data.get(name, [])
    if not isinstance(value, list) or not all(isinstance(i, str) and i for i in value):
        raise ValidationError(f"{where}.{name}: expected a list of message ids")
    return value


def _turn(data: Mapping[str, Any], where: str) -> models.TurnRecord:
    message_ids = data.get("message_ids", [])
    if not isinstance(message_ids, list):
        raise ValidationError(f"{where}.message_ids: expected a list")
    return models.TurnRecord(
        id=uuid_at(data, "id", where),
        agent_id=text_at(data, "agent_id", where),
        thread_id=thread_ref_at(data, "thread_id", where),
        resource_id=text_at(data, "resource_id", where),
        status=choice_at(data, "status", where, models.TurnRecord.Status.choices),
        model=text_at(data, "model", where),
        steps=integer_at(data, "steps", where),
        usage=dict_at(data, "usage", where),
        manifest=dict_at(data, "manifest", where),
        message_ids=message_ids,
        tripwire_id=uuid_at(data, "tripwire_id", where) if data.get("tripwire_id") else None,
        error=text_at(data, "error", where),
        started_at=time_at(data, "started_at", where),
        duration_ms=number_at(data, "duration_ms", where),
    )


def _tripwire(data: Mapping[str, Any], where: str) -> models.TripwireLog:
    return Log(
        id=uuid_at(data, "id", where),
        agent_id=text_at(data, "agent_id", where),
        processor_id=text_at(data, "processor_id", where),
        phase=choice_at(data, "phase", where, Log.Phase.choices),
        reason=text_at(data, "reason", where),
        retry=bool(data.get("retry", False)),
        metadata=dict_at(data, "metadata", where),
        thread_id=thread_ref_at(data, "thread_id", where),
        resource_id=text_at(data, "resource_id", where),
        content=storable(data.get("content"), f"{where}.content"),
        status=choice_at(data, "status", where, Log.Status.choices),
        reviewed_at=time_at(data, "reviewed_at", where, optional=True),
        note=text_at(data, "note", where),
        created_at=time_at(data, "created_at", where),
    )


def _pending(data: Mapping[str, Any], where: str, resource_id: str) -> models.PendingToolCall:
    Call = models.PendingToolCall
    kind = text_at(data, "kind", where)
    if kind not in ("approval", "client"):
        raise ValidationError(f"{where}.kind: expected 'approval' or 'client'")
    edited = data.get("edited_arguments")
    if edited is not None and not isinstance(edited, Mapping):
        raise ValidationError(f"{where}.edited_arguments: expected an object or null")
    return Call(
        id=uuid_at(data, "id", where),
        agent_id=id_at(data, "agent_id", where),
        thread_id=thread_ref_at(data, "thread_id", where),
        resource_id=resource_id,
        kind=kind,
        state=choice_at(data, "state", where, Call.State.choices),
        tool_name=id_at(data, "tool_name", where),
        tool_call_id=id_at(data, "tool_call_id", where),
        arguments=dict_at(data, "arguments", where),
        edited_arguments=storable(dict(edited), f"{where}.edited_arguments") if edited is not None else None,
        turn=dict_at(data, "turn", where),
        result=storable(data.get("result"), f"{where}.result"),
        result_is_error=bool(data.get("result_is_error", False)),
        decided_at=time_at(data, "decided_at", where, optional=True),
        reason=text_at(data, "reason", where),
        created_at=time_at(data, "created_at", where),
        expires_at=time_at(data, "expires_at", where, optional=True),
        completed_at=time_at(data, "completed_at", where, optional=True),
    )


def _attachment(data: Mapping[str, Any], where: str, resource_id: str) -> models.Attachment:
    message_id = data.get("message_id")
    if message_id is not None and not isinstance(message_id, str):
        raise ValidationError(f"{where}.message_id: expected a string or null")
    return models.Attachment(
        id=uuid_at(data, "id", where),
        resource_id=resource_id,
        message_id=message_key(resource_id, message_id) if message_id else None,
        name=text_at(data, "name", where)[:255],
        content_type=text_at(data, "content_type", where)[:255],
        size=integer_at(data, "size", where, high=SEQUENCE_MAX),
        sha256=text_at(data, "sha256", where),
        created_at=time_at(data, "created_at", where),
    )
