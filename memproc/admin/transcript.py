"""Turns stored message JSON into what the transcript template shows.

Works on the raw stored dicts rather than `memproc.messages` value types, so a malformed or
unknown part is shown as JSON instead of failing the page.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from django.db.models import Count, Sum
from django.urls import NoReverseMatch, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from memproc import models
from memproc.admin.common import admin_url, one_line, pretty_json
from memproc.admin.turn_panels import attach_turn_panels
from memproc.admin.turn_views import TurnView
from memproc.services.attachments import attachment_download_url

TRANSCRIPT_PAGE_SIZE = 500
MESSAGE_COLUMNS = ("public_id", "role", "content", "token_count", "created_at", "sequence")
ROLE_LABELS = dict(models.Message.Role.choices)


@dataclass
class AttachmentView:
    id: str
    name: str
    media_type: str
    size: int | None
    url: str | None = None
    admin_url: str | None = None
    missing: bool = False


@dataclass
class PartView:
    kind: str  # text | tool-call | tool-result | file | attachment | unknown
    text: str = ""
    name: str = ""
    call_id: str = ""
    summary: str = ""
    body: str = ""
    truncated: bool = False
    is_error: bool = False
    media_type: str = ""
    url: str | None = None
    size: int | None = None
    attachment_id: str = ""
    attachment: AttachmentView | None = None


@dataclass
class MessageView:
    id: str
    role: str
    parts: list[PartView] = field(default_factory=list)
    created_at: datetime | None = None
    token_count: int | None = None
    sequence: int | None = None
    turn: TurnView | None = None  # "why the model saw this", under the reply a turn saved
    # A guardrail's flag (content.metadata.quarantine), the text with the flagged stretches marked,
    # and what guardrails withheld from the prompt of the turn this message started.
    quarantine: dict[str, Any] | None = None
    flag_text: SafeString | None = None
    withheld: list[dict[str, Any]] = field(default_factory=list)
    review_url: str | None = None

    @property
    def role_label(self) -> str:
        return str(ROLE_LABELS.get(self.role, self.role))

    @property
    def flag_active(self) -> bool:
        return bool(self.quarantine) and self.quarantine.get("status") in models.QUARANTINE_ACTIVE


def transcript_context(*, thread_key: str, page: Any) -> dict[str, Any]:
    """One page of a thread's transcript. At most five queries, whatever the page holds: totals, the
    page's rows, their attachments, the turn records of its replies, the messages those name."""
    messages = models.Message.objects.filter(thread_id=thread_key)
    totals = messages.aggregate(count=Count("pk"), tokens=Sum("token_count"))
    count = totals["count"] or 0
    pages = max(1, -(-count // TRANSCRIPT_PAGE_SIZE))
    number = _page_number(page, pages)
    start = (number - 1) * TRANSCRIPT_PAGE_SIZE
    rows = list(messages.order_by("sequence").values(*MESSAGE_COLUMNS)[start : start + TRANSCRIPT_PAGE_SIZE])
    entries = message_views(rows, resource_id=models.split_thread_key(thread_key)[0])
    # A later page's turns started after this page's newest message; the last page takes any.
    until = max((r["created_at"] for r in rows), default=None) if number < pages else None
    attach_turn_panels(entries, thread_key=thread_key, until=until)
    return {
        "entries": entries,
        "message_count": count,
        "token_total": totals["tokens"],
        "page": number,
        "pages": pages,
        "page_range": range(1, pages + 1) if pages > 1 else (),
    }


def message_views(rows: Iterable[Mapping[str, Any]], *, resource_id: str = "") -> list[MessageView]:
    """Rows are stored messages (`content` = {"parts": [...]}) or blocked ones ({"id", "role", "parts"}),
    of `resource_id`: the thread ids their metadata names are that resource's."""
    views = [_message_view(row, resource_id=resource_id) for row in rows]
    _resolve_attachments([p for v in views for p in v.parts if p.kind == "attachment"])
    return views


def _message_view(row: Mapping[str, Any], *, resource_id: str) -> MessageView:
    content = row.get("content")
    source = content if isinstance(content, Mapping) else row
    parts = source.get("parts") or []
    if not isinstance(parts, list):
        parts = [parts]
    view = MessageView(
        id=str(row.get("public_id") or row.get("id") or ""),
        role=str(row.get("role") or ""),
        parts=[part_view(p) for p in parts],
        created_at=row.get("created_at"),
        token_count=row.get("token_count"),
        sequence=row.get("sequence"),
    )
    metadata = source.get("metadata")
    if isinstance(metadata, Mapping):
        _attach_flags(view, metadata, stored=row.get("sequence") is not None, resource_id=resource_id)
    return view


def _attach_flags(view: MessageView, metadata: Mapping[str, Any], *, stored: bool, resource_id: str) -> None:
    flag = metadata.get("quarantine")
    if isinstance(flag, Mapping):
        view.quarantine = dict(flag)
        text = "".join(p.text for p in view.parts if p.kind == "text")
        spans = flag.get("spans")
        view.flag_text = highlighted(text, spans) if spans else None
        stored_key = models.message_key(resource_id, view.id) if stored and view.id else ""
        view.review_url = flag_review_url(stored_key) if stored_key else None
    withheld = metadata.get("withheld")
    if isinstance(withheld, list):
        for entry in withheld:
            if not isinstance(entry, Mapping):
                continue
            item = dict(entry)
            thread_id, message_id = item.get("thread_id"), item.get("message_id")
            # A turn's history and recall stay in its resource: the withheld message's thread is there.
            key = models.thread_key(resource_id, str(thread_id)) if thread_id and resource_id else ""
            thread_url = admin_url("thread", key) if key else None
            item["url"] = f"{thread_url}#message-{message_id}" if thread_url and message_id else None
            stored_key = models.message_key(resource_id, str(message_id)) if message_id else ""
            item["review_url"] = flag_review_url(stored_key) if stored_key else None
            view.withheld.append(item)


def flag_review_url(message_key: str) -> str | None:
    """The admin page where an operator confirms or clears a message's flag (or flags it), by the
    message's key."""
    try:
        return reverse("admin:memproc_tripwirelog_message_flag", args=[message_key])
    except NoReverseMatch:
        return None


def highlighted(text: str, spans: Any) -> SafeString:
    """`text` escaped, with each valid [start, end] span in <mark>."""
    clean: list[tuple[int, int]] = []
    for span in spans if isinstance(spans, (list, tuple)) else ():
        try:
            start, end = int(span[0]), int(span[1])
        except (TypeError, ValueError, IndexError):
            continue
        if 0 <= start < end <= len(text) and (not clean or start >= clean[-1][1]):
            clean.append((start, end))
    pieces: list[tuple[str, str]] = []
    cursor = 0
    for start, end in clean:
        pieces.append(("{}", text[cursor:start]))
        pieces.append(('<mark class="memproc-flagged">{}</mark>', text[start:end]))
        cursor = end
    pieces.append(("{}", text[cursor:]))
    return format_html_join("", "{}", ((format_html(fmt, value),) for fmt, value in pieces))


def part_view(data: Any) -> PartView:
    kind = data.get("type") if isinstance(data, Mapping) else None
    builder = _BUILDERS.get(kind) if isinstance(kind, str) else None
    if builder is None:
        body, truncated = pretty_json(data)
        return PartView(kind="unknown", body=body, truncated=truncated, summary=str(kind or "?"))
    return builder(data)


def _text(data: Mapping[str, Any]) -> PartView:
    return PartView(kind="text", text=str(data.get("text") or ""))


def _tool_call(data: Mapping[str, Any]) -> PartView:
    args = data.get("args") or {}
    body, truncated = pretty_json(args)
    return PartView(
        kind="tool-call",
        name=str(data.get("tool_name") or ""),
        call_id=str(data.get("tool_call_id") or ""),
        summary=one_line(args),
        body=body,
        truncated=truncated,
    )


def _tool_result(data: Mapping[str, Any]) -> PartView:
    result = data.get("result")
    body, truncated = pretty_json(result)
    return PartView(
        kind="tool-result",
        name=str(data.get("tool_name") or ""),
        call_id=str(data.get("tool_call_id") or ""),
        summary=one_line(result),
        body=body,
        truncated=truncated,
        is_error=bool(data.get("is_error")),
    )


def _file(data: Mapping[str, Any]) -> PartView:
    url = data.get("url")
    inline = data.get("data")
    return PartView(
        kind="file",
        name=str(data.get("name") or ""),
        media_type=str(data.get("media_type") or ""),
        url=url if isinstance(url, str) and _is_web_url(url) else None,
        text="" if inline or not url else str(url),
        size=_inline_size(inline),
    )


def _attachment(data: Mapping[str, Any]) -> PartView:
    size = data.get("size")
    return PartView(
        kind="attachment",
        attachment_id=str(data.get("attachment_id") or ""),
        name=str(data.get("name") or ""),
        media_type=str(data.get("media_type") or ""),
        size=size if isinstance(size, int) else None,
    )


_BUILDERS = {
    "text": _text,
    "tool-call": _tool_call,
    "tool-result": _tool_result,
    "file": _file,
    "attachment": _attachment,
}


def _resolve_attachments(parts: list[PartView]) -> None:
    """Looks up every referenced attachment in one query and gives each part its storage URL."""
    ids = {p.attachment_id for p in parts if _is_uuid(p.attachment_id)}
    found = {str(a.pk): a for a in models.Attachment.objects.filter(pk__in=ids)} if ids else {}
    for part in parts:
        row = found.get(part.attachment_id)
        if row is None:
            part.attachment = AttachmentView(
                id=part.attachment_id,
                name=part.name,
                media_type=part.media_type,
                size=part.size,
                missing=True,
            )
        else:
            part.attachment = attachment_view(row)


def attachment_view(row: models.Attachment) -> AttachmentView:
    return AttachmentView(
        id=str(row.pk),
        name=row.name,
        media_type=row.content_type,
        size=row.size,
        url=file_url(row),
        admin_url=admin_url("attachment", row.pk),
    )


def file_url(row: models.Attachment) -> str | None:
    """Where an operator downloads the file: the storage's signed URL that sends the download headers
    (S3), else the admin's download view; never the storage's plain URL, which a file server may
    serve inline on the site's origin."""
    if not row.file:
        return None
    try:
        signed = attachment_download_url(row)
    except Exception:  # a storage that is down must not break the page
        signed = None
    return signed or reverse("admin:memproc_attachment_download", args=[row.pk])


def _page_number(value: Any, pages: int) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        return 1
    return min(max(number, 1), pages)


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except (ValueError, AttributeError, TypeError):
        return False
    return True


def _is_web_url(url: str) -> bool:
    return urlsplit(url).scheme in ("http", "https")


def _inline_size(data: Any) -> int | None:
    if not isinstance(data, str) or not data:
        return None
    payload = data.split(",", 1)[1] if data.startswith("data:") and "," in data else data
    payload = payload.strip()
    return len(payload) * 3 // 4 - payload[-2:].count("=")  # the decoded size, without decoding
