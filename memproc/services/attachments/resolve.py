"""Prompt time: references become a URL or the file's bytes for the model, never written back."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from memproc import logs, models
from memproc.conf import settings
from memproc.messages import AttachmentRef, FilePart, Message, Part
from memproc.processors.attachment_checks import type_allowed
from memproc.processors.attachment_types import StagedAttachment
from memproc.services.attachments.files import attachment_read, attachment_url, parse_uuid, unsaved_row

logger = logging.getLogger(__name__)

# What the chat-completions protocol accepts only as base64 data (every "file" part, audio).
OPENAI_INLINE_TYPES = ("application/*", "text/*", "audio/*")


def attachment_model_options(model: Any) -> dict[str, Any]:
    """Attachment options for a model, the most specific winning: the protocol's default, the
    model's `inline_attachments` attribute, MEMPROC["MODELS"][provider], then
    MEMPROC["MODELS"]["provider/model"].

    `inline_attachments` is true (send bytes), false (send URLs), or a list of content types
    ("application/pdf", "text/*") to send as bytes. OpenAI's chat-completions protocol takes images
    by URL but other files only as base64 data, so OpenAI-compatible models default to
    OPENAI_INLINE_TYPES.
    """
    from memproc.llm.openai import OpenAIChatModel

    model_id = str(getattr(model, "id", "") or "")
    provider = getattr(model, "provider", None) or model_id.partition("/")[0]
    options: dict[str, Any] = {}
    if isinstance(model, OpenAIChatModel):
        options["inline_attachments"] = list(OPENAI_INLINE_TYPES)
    declared = getattr(model, "inline_attachments", None)
    if declared is not None:
        options["inline_attachments"] = declared
    configured = settings.MODELS or {}
    for key in (provider, model_id):
        value = configured.get(key) if key else None
        if isinstance(value, Mapping) and "inline_attachments" in value:
            options["inline_attachments"] = value["inline_attachments"]
    return options


def attachments_resolve(
    *,
    messages: Sequence[Message],
    resource_id: str | None,
    model: Any = None,
    inline: bool | Sequence[str] | None = None,
    staged: Sequence[StagedAttachment] = (),
) -> list[Message]:
    """The messages as the model sees them: each reference to an attachment of the resource becomes
    a `FilePart` with the file's URL (signed on S3) or, with inline bytes, its data.

    Bytes are sent when `inline` (default: the model's `inline_attachments` option) is true or
    lists the file's type, when the file is at most INLINE_ATTACHMENT_BYTES, or, when the option
    does not decide, when the storage's URL is not absolute (a model cannot fetch "/media/...").
    The result is for the request only; stored messages keep their references. Unknown ids and
    other resources' stay references (the model sees a placeholder). `staged` are the turn's own
    files, whose rows are written only at commit. One query; none when no message holds a reference.
    """
    ids = {
        parsed
        for m in messages
        for p in m.parts
        if isinstance(p, AttachmentRef) and (parsed := parse_uuid(p.attachment_id)) is not None
    }
    if not ids:
        return list(messages)
    rows = {str(item.id): unsaved_row(item) for item in staged if item.resource_id == (resource_id or "")}
    if ids - {uuid.UUID(key) for key in rows}:
        rows.update(
            (str(row.pk), row)
            for row in models.Attachment.objects.filter(pk__in=ids, resource_id=resource_id or "")
        )
    if inline is None:
        inline = attachment_model_options(model).get("inline_attachments")
    files: dict[str, FilePart | None] = {}
    out = []
    for message in messages:
        if not any(isinstance(p, AttachmentRef) for p in message.parts):
            out.append(message)
            continue
        parts = tuple(_resolve(p, rows, files, inline) for p in message.parts)
        out.append(message.replace(parts=parts))
    return out


def _resolve(
    part: Part,
    rows: dict[str, models.Attachment],
    files: dict[str, FilePart | None],
    inline: bool | Sequence[str] | None,
) -> Part:
    if not isinstance(part, AttachmentRef):
        return part
    key = str(parse_uuid(part.attachment_id))
    if key not in files:
        row = rows.get(key)
        files[key] = None if row is None else _file_part(row, _inline_for(row, inline))
    resolved = files[key]
    if resolved is None:
        return part
    return FilePart(
        data=resolved.data, url=resolved.url, media_type=resolved.media_type, name=part.name or resolved.name
    )


def _inline_for(row: models.Attachment, inline: bool | Sequence[str] | None) -> bool | None:
    """True or False when the option decides for this file; None leaves it to the URL."""
    if inline is None or isinstance(inline, bool):
        return inline
    if isinstance(inline, str):
        inline = [inline]
    return True if type_allowed(row.content_type, list(inline)) else None


def _file_part(row: models.Attachment, inline: bool | None) -> FilePart | None:
    try:
        url = "" if inline else attachment_url(attachment=row)
        as_bytes = (
            inline is True
            or row.size <= int(settings.INLINE_ATTACHMENT_BYTES)
            or (inline is None and not url.startswith(("http://", "https://")))
        )
        if as_bytes:
            return FilePart(data=attachment_read(attachment=row), media_type=row.content_type, name=row.name)
        return FilePart(url=url, media_type=row.content_type, name=row.name)
    except Exception as exc:  # a storage that is down or a missing file must not fail the turn
        logs.failure(
            logger,
            "memproc: could not resolve attachment %s for the model",
            row.pk,
            exc=exc,
            level=logging.WARNING,
        )
        return None
