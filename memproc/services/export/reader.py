"""Checking an export document and turning it into unsaved rows. A bad value is a ValidationError
that names its place (`threads[2].messages[5].role: ...`); nothing is read from the database.

A document names threads by their thread id (within the document's resource), as every version-1
document has; the rows that hold thread keys get the key of (the document's resource, that id)."""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django.utils.dateparse import parse_datetime

from memproc import models
from memproc.exceptions import AttachmentError, ValidationError
from memproc.messages import UNSTORABLE, Message, has_unstorable_text, message_from_content, part_errors
from memproc.models import THREAD_KEY_SEPARATOR, message_key, message_keys, thread_key
from memproc.processors.attachment_checks import inline_files_check
from memproc.services.attachments import attachment_body_limit
from memproc.services.export.document import FORMAT, VERSION

INT_MAX = 2**31 - 1  # PositiveIntegerField's range on every database
# Sequences (BIGINT columns) and file sizes: room for the thread to grow, and exact in every JSON reader.
SEQUENCE_MAX = 2**53 - 1

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
    rows = Rows(resource=_resource(_object(document, "resource", "resource")))
    for i, item in enumerate(_items(document, "threads")):
        thread = _thread(item, f"threads[{i}]", rows.resource.pk)
        rows.threads.append(thread)
        if item.get("summary") is not None:
            rows.summaries.append(
                _summary(_object(item, "summary", f"threads[{i}]"), f"threads[{i}].summary", thread)
            )
        for j, raw in enumerate(_items(item, "messages", f"threads[{i}]")):
            message = _message(raw, f"threads[{i}].messages[{j}]", thread)
            rows.messages.append(message)
            # The thread's counter past its messages, or its next turn would take a used sequence.
            thread.last_sequence = max(thread.last_sequence, message.sequence)
    for i, item in enumerate(_items(document, "working_memory_revisions")):
        revision = _revision(item, f"working_memory_revisions[{i}]", rows.resource.pk)
        rows.revisions.append(revision)
        if isinstance(item.get("actor"), str):
            rows.actors[revision.pk] = item["actor"]
    for i, item in enumerate(_items(document, "turn_records")):
        rows.turns.append(_turn(item, f"turn_records[{i}]"))
    for i, item in enumerate(_items(document, "tripwire_logs")):
        log = _tripwire(item, f"tripwire_logs[{i}]")
        rows.tripwires.append(log)
        if isinstance(item.get("reviewed_by"), str):
            rows.reviewers[log.pk] = item["reviewed_by"]
    for i, item in enumerate(_items(document, "pending_tool_calls")):  # absent before approvals
        call = _pending(item, f"pending_tool_calls[{i}]", rows.resource.pk)
        rows.pending.append(call)
        if isinstance(item.get("decided_by"), str):
            rows.deciders[call.pk] = item["decided_by"]
    for i, item in enumerate(_items(document, "attachments")):
        where = f"attachments[{i}]"
        attachment = _attachment(item, where, rows.resource.pk)
        rows.attachments.append(attachment)
        rows.files[attachment.pk] = _text(item, "file", where)
    return rows


def _resource(data: Mapping[str, Any]) -> models.Resource:
    where = "resource"
    return models.Resource(
        id=_resource_id(data, "id", where),
        metadata=_obj(data, "metadata", where),
        working_memory=_text(data, "working_memory", where),
        working_memory_version=_integer(data, "working_memory_version", where),
        # Optional: documents written before the memory view have none.
        pinned_fields=_names(data, "pinned_fields", where),
        created_at=_time(data, "created_at", where),
        updated_at=_time(data, "updated_at", where),
    )


def _thread(data: Mapping[str, Any], where: str, resource_id: str) -> models.Thread:
    """An unsaved thread with its key set (bulk_create does not run `Thread.save`)."""
    public_id = _thread_id(data, "id", where)
    return models.Thread(
        id=thread_key(resource_id, public_id),
        public_id=public_id,
        resource_id=resource_id,
        title=_text(data, "title", where)[:255],
        agent_id=_text(data, "agent_id", where)[:255],
        metadata=_obj(data, "metadata", where),
        working_memory=_text(data, "working_memory", where),
        working_memory_version=_integer(data, "working_memory_version", where),
        last_sequence=_integer(data, "last_sequence", where, high=SEQUENCE_MAX),
        created_at=_time(data, "created_at", where),
        updated_at=_time(data, "updated_at", where),
        # Optional: documents written before threads could be archived have none.
        archived_at=_time(data, "archived_at", where, optional=True),
    )


def _summary(data: Mapping[str, Any], where: str, thread: models.Thread) -> models.ThreadSummary:
    return models.ThreadSummary(
        thread_id=thread.pk,
        text=_text(data, "text", where),
        covered_sequence=_integer(data, "covered_sequence", where, high=SEQUENCE_MAX),
        token_count=_integer(data, "token_count", where),
    )


def _message(data: Mapping[str, Any], where: str, thread: models.Thread) -> models.Message:
    """A message row, checked as the API checks a turn's messages (`_message_check`); `text` is
    computed from the content's parts, as a save computes it."""
    content = _obj(data, "content", where)
    role = _choice(data, "role", where, models.Message.Role.choices)
    if role == models.Message.Role.SYSTEM:
        raise ValidationError(
            f"{where}.role: system messages are never stored (an agent's instructions are its system "
            "prompt), so an export holds none"
        )
    value = _message_check(data, where, role, content)
    token_count = _integer(data, "token_count", where, optional=True)
    return models.Message(
        id=message_key(thread.resource_id, value.id),
        public_id=value.id,
        thread_id=thread.pk,
        resource_id=thread.resource_id,
        role=role,
        content=content,
        text=value.text,
        token_count=token_count,
        created_at=_time(data, "created_at", where),
        sequence=_integer(data, "sequence", where, low=1, high=SEQUENCE_MAX),
        recall_excluded=_flag(data, "recall_excluded", where),
    )


def _message_check(data: Mapping[str, Any], where: str, role: str, content: dict[str, Any]) -> Message:
    """The message's content as the API takes it: parts of the right shape, inline files within
    MAX_ATTACHMENT_BYTES, and no larger than the largest request the API reads."""
    if not isinstance(content.get("parts", []), list):
        raise ValidationError(f"{where}.content.parts: expected a list of parts")
    if not isinstance(content.get("metadata") or {}, dict):
        raise ValidationError(f"{where}.content.metadata: expected an object")
    try:
        value = message_from_content(id=_id(data, "id", where), role=role, content=content)
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
    scope = _choice(data, "scope", where, Revision.Scope.choices)
    if scope == Revision.Scope.THREAD:
        key = thread_key(resource_id, _thread_id(data, "key", where))
    else:
        key = _id(data, "key", where)
    return Revision(
        id=_uuid(data, "id", where),
        scope=scope,
        key=key,
        old=_text(data, "old", where),
        new=_text(data, "new", where),
        version=_integer(data, "version", where),
        source=_choice(data, "source", where, Revision.Source.choices),
        thread_id=thread_key(resource_id, _thread_ref(data, "thread_id", where)),
        turn_id=_uuid(data, "turn_id", where) if data.get("turn_id") else None,
        message_ids=message_keys(resource_id, _ids(data, "message_ids", where)),
        created_at=_time(data, "created_at", where),
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
        id=_uuid(data, "id", where),
        agent_id=_text(data, "agent_id", where),
        thread_id=_thread_ref(data, "thread_id", where),
        resource_id=_text(data, "resource_id", where),
        status=_choice(data, "status", where, models.TurnRecord.Status.choices),
        model=_text(data, "model", where),
        steps=_integer(data, "steps", where),
        usage=_obj(data, "usage", where),
        manifest=_obj(data, "manifest", where),
        message_ids=message_ids,
        tripwire_id=_uuid(data, "tripwire_id", where) if data.get("tripwire_id") else None,
        error=_text(data, "error", where),
        started_at=_time(data, "started_at", where),
        duration_ms=_number(data, "duration_ms", where),
    )


def _tripwire(data: Mapping[str, Any], where: str) -> models.TripwireLog:
    return Log(
        id=_uuid(data, "id", where),
        agent_id=_text(data, "agent_id", where),
        processor_id=_text(data, "processor_id", where),
        phase=_choice(data, "phase", where, Log.Phase.choices),
        reason=_text(data, "reason", where),
        retry=bool(data.get("retry", False)),
        metadata=_obj(data, "metadata", where),
        thread_id=_thread_ref(data, "thread_id", where),
        resource_id=_text(data, "resource_id", where),
        content=_storable(data.get("content"), f"{where}.content"),
        status=_choice(data, "status", where, Log.Status.choices),
        reviewed_at=_time(data, "reviewed_at", where, optional=True),
        note=_text(data, "note", where),
        created_at=_time(data, "created_at", where),
    )


def _pending(data: Mapping[str, Any], where: str, resource_id: str) -> models.PendingToolCall:
    Call = models.PendingToolCall
    kind = _text(data, "kind", where)
    if kind not in ("approval", "client"):
        raise ValidationError(f"{where}.kind: expected 'approval' or 'client'")
    edited = data.get("edited_arguments")
    if edited is not None and not isinstance(edited, Mapping):
        raise ValidationError(f"{where}.edited_arguments: expected an object or null")
    return Call(
        id=_uuid(data, "id", where),
        agent_id=_id(data, "agent_id", where),
        thread_id=_thread_ref(data, "thread_id", where),
        resource_id=resource_id,
        kind=kind,
        state=_choice(data, "state", where, Call.State.choices),
        tool_name=_id(data, "tool_name", where),
        tool_call_id=_id(data, "tool_call_id", where),
        arguments=_obj(data, "arguments", where),
        edited_arguments=_storable(dict(edited), f"{where}.edited_arguments") if edited is not None else None,
        turn=_obj(data, "turn", where),
        result=_storable(data.get("result"), f"{where}.result"),
        result_is_error=bool(data.get("result_is_error", False)),
        decided_at=_time(data, "decided_at", where, optional=True),
        reason=_text(data, "reason", where),
        created_at=_time(data, "created_at", where),
        expires_at=_time(data, "expires_at", where, optional=True),
        completed_at=_time(data, "completed_at", where, optional=True),
    )


def _attachment(data: Mapping[str, Any], where: str, resource_id: str) -> models.Attachment:
    message_id = data.get("message_id")
    if message_id is not None and not isinstance(message_id, str):
        raise ValidationError(f"{where}.message_id: expected a string or null")
    return models.Attachment(
        id=_uuid(data, "id", where),
        resource_id=resource_id,
        message_id=message_key(resource_id, message_id) if message_id else None,
        name=_text(data, "name", where)[:255],
        content_type=_text(data, "content_type", where)[:255],
        size=_integer(data, "size", where, high=SEQUENCE_MAX),
        sha256=_text(data, "sha256", where),
        created_at=_time(data, "created_at", where),
    )


# --- field readers ------------------------------------------------------------------------------------


def _object(data: Any, key: str, where: str) -> Mapping[str, Any]:
    value = data.get(key) if isinstance(data, Mapping) else None
    if not isinstance(value, Mapping):
        raise ValidationError(f"{where}: expected an object")
    return value


def _items(data: Mapping[str, Any], key: str, where: str = "") -> list[Mapping[str, Any]]:
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, Mapping) for v in value):
        raise ValidationError(f"{f'{where}.' if where else ''}{key}: expected a list of objects")
    return value


def _id(data: Mapping[str, Any], key: str, where: str) -> str:
    value = data.get(key)
    if not isinstance(value, str) or not value or len(value) > 255 or UNSTORABLE.search(value):
        raise ValidationError(f"{where}.{key}: expected an id (a string of 1 to 255 characters)")
    return value


def _resource_id(data: Mapping[str, Any], key: str, where: str) -> str:
    """A resource id: it starts the keys of the resource's threads, so it cannot hold their separator."""
    value = _id(data, key, where)
    if THREAD_KEY_SEPARATOR in value:
        raise ValidationError(f"{where}.{key}: a resource id cannot hold control characters")
    return value


def _thread_id(data: Mapping[str, Any], key: str, where: str) -> str:
    """A thread id as callers know it. A stored key (resource id, separator, thread id) is refused
    rather than guessed at: no export writes one."""
    value = _id(data, key, where)
    if THREAD_KEY_SEPARATOR in value:
        raise ValidationError(f"{where}.{key}: expected a thread id, not a stored thread key")
    return value


def _thread_ref(data: Mapping[str, Any], key: str, where: str) -> str:
    """An optional thread id ("": none), beside a resource id or of the document's resource."""
    return _thread_id(data, key, where) if _text(data, key, where) else ""


def _uuid(data: Mapping[str, Any], key: str, where: str) -> uuid.UUID:
    try:
        return uuid.UUID(str(data.get(key)))
    except ValueError as exc:
        raise ValidationError(f"{where}.{key}: expected a UUID") from exc


def _text(data: Mapping[str, Any], key: str, where: str) -> str:
    value = data.get(key, "")
    if not isinstance(value, str) or UNSTORABLE.search(value):
        raise ValidationError(f"{where}.{key}: expected a string (without NUL or lone surrogates)")
    return value


def _integer(
    data: Mapping[str, Any],
    key: str,
    where: str,
    *,
    low: int = 0,
    high: int = INT_MAX,
    optional: bool = False,
) -> Any:
    """An integer from `low` to `high` (an integral float is taken as one). The default range fits
    the integer columns of every database; sequences and sizes go to SEQUENCE_MAX."""
    value = data.get(key, None if optional else 0)
    if value is None and optional:
        return None
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValidationError(f"{where}.{key}: expected a whole number from {low} to {high}")
    return value


def _number(data: Mapping[str, Any], key: str, where: str) -> float:
    value = data.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
        raise ValidationError(f"{where}.{key}: expected a finite number >= 0")
    return float(value)


def _obj(data: Mapping[str, Any], key: str, where: str) -> dict[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise ValidationError(f"{where}.{key}: expected an object")
    return _storable(value, f"{where}.{key}")


def _storable(value: Any, where: str) -> Any:
    if has_unstorable_text(value):
        raise ValidationError(f"{where}: holds NUL characters or lone surrogates, which no database stores")
    return value


def _time(data: Mapping[str, Any], key: str, where: str, *, optional: bool = False) -> Any:
    value = data.get(key)
    if value is None and optional:
        return None
    try:
        parsed = parse_datetime(value) if isinstance(value, str) else None
    except ValueError:
        parsed = None
    if parsed is None or parsed.tzinfo is None:
        raise ValidationError(f"{where}.{key}: expected an ISO 8601 time with an offset")
    return parsed


def _names(data: Mapping[str, Any], key: str, where: str) -> list[str]:
    """An optional list of short strings (absent: empty)."""
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and 0 < len(v) <= 255 for v in value):
        raise ValidationError(f"{where}.{key}: expected a list of names (strings of 1 to 255 characters)")
    return _storable(list(dict.fromkeys(value)), f"{where}.{key}")


def _flag(data: Mapping[str, Any], key: str, where: str) -> bool:
    """An optional boolean (absent: false)."""
    value = data.get(key, False)
    if not isinstance(value, bool):
        raise ValidationError(f"{where}.{key}: expected true or false")
    return value


def _choice(data: Mapping[str, Any], key: str, where: str, choices: Any) -> str:
    value = data.get(key)
    allowed = [c[0] for c in choices]
    if value not in allowed:
        raise ValidationError(f"{where}.{key}: expected one of {', '.join(allowed)}")
    return value
