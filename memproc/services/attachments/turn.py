"""A turn's files: rows written at commit, linked to the saved messages, files discarded otherwise."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence

from memproc import models
from memproc.messages import AttachmentRef, FilePart, Message
from memproc.models import message_key
from memproc.processors.attachment_types import StagedAttachment
from memproc.services.attachments.files import (
    attachment_storage,
    file_delete,
    file_delete_on_commit,
    parse_uuid,
    row_insert,
)


def attachments_commit(*, staged: Sequence[StagedAttachment], messages: Sequence[Message]) -> list[Message]:
    """Writes the rows of the files a turn staged; call it inside the turn's transaction, before the
    messages are written, and `attachments_link` after.

    Staged files that no saved message references are deleted after commit. If a concurrent turn
    stored the same bytes for the resource first, its row wins: the references are remapped to it
    and this turn's copy is deleted after commit. Returns the messages to save.
    """
    referenced = attachment_links(messages)
    remap: dict[str, str] = {}
    seen: set[str] = set()
    for item in staged:
        if not item.created or item.id in seen:
            continue
        seen.add(item.id)
        if item.id not in referenced:
            file_delete_on_commit(item.file_name)
            continue
        winner = row_insert(item)
        if winner != item.id:
            remap[item.id] = winner
            file_delete_on_commit(item.file_name)
    if not remap:
        return list(messages)
    return [_remap_refs(m, remap) for m in messages]


def attachments_link(*, resource_id: str, messages: Sequence[Message]) -> int:
    """Points every attachment of the resource that the (saved) messages reference, and that has no
    message yet, at the first message referencing it. One UPDATE per message with references."""
    by_message: dict[str, list[uuid.UUID]] = {}
    for attachment_id, message_id in attachment_links(messages).items():
        parsed = parse_uuid(attachment_id)
        if parsed is not None:
            by_message.setdefault(message_id, []).append(parsed)
    linked = 0
    for message_id, ids in by_message.items():
        linked += models.Attachment.objects.filter(
            pk__in=ids, resource_id=resource_id, message__isnull=True
        ).update(message_id=message_key(resource_id, message_id))
    return linked


def attachments_discard(*, staged: Sequence[StagedAttachment]) -> int:
    """Deletes, now, the files a turn wrote and never committed (rows were never written)."""
    names = {item.file_name for item in staged if item.created and item.file_name}
    for name in names:
        file_delete(attachment_storage(), name)
    return len(names)


def attachment_links(messages: Sequence[Message]) -> dict[str, str]:
    """Attachment id -> the id of the first message that references it."""
    links: dict[str, str] = {}
    for message in messages:
        for part in message.parts:
            if isinstance(part, AttachmentRef):
                links.setdefault(part.attachment_id, message.id)
    return links


def messages_without_file_data(messages: Sequence[Message]) -> list[Message]:
    """The messages with inline file bytes dropped (name and type kept), e.g. for tripwire logs."""
    out = []
    for message in messages:
        if not any(
            isinstance(p, FilePart) and (p.data is not None or _is_data_uri(p.url)) for p in message.parts
        ):
            out.append(message)
            continue
        parts = tuple(
            FilePart(url=None if _is_data_uri(p.url) else p.url, media_type=p.media_type, name=p.name)
            if isinstance(p, FilePart)
            else p
            for p in message.parts
        )
        out.append(message.replace(parts=parts))
    return out


def _remap_refs(message: Message, remap: Mapping[str, str]) -> Message:
    if not any(isinstance(p, AttachmentRef) and p.attachment_id in remap for p in message.parts):
        return message
    parts = tuple(
        AttachmentRef(remap[p.attachment_id], p.name, p.media_type, p.size)
        if isinstance(p, AttachmentRef) and p.attachment_id in remap
        else p
        for p in message.parts
    )
    return message.replace(parts=parts)


def _is_data_uri(url: str | None) -> bool:
    return isinstance(url, str) and url[:5].lower() == "data:"
