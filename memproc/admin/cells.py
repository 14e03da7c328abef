"""How list columns show long values, so a list fits the screen (memproc/static/memproc/admin.css):
ids cut to one line with the whole value in a title, prose wrapped to a few lines, times on one line,
and several short values stacked in one column instead of a column each."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.utils import timezone
from django.utils.formats import date_format
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext_lazy as _

from memproc.admin.common import admin_url
from memproc.models import split_thread_key, thread_key


def clipped(value: Any, *, url: str | None = None, quiet: bool = False) -> SafeString:
    """One line of a cell, cut with an ellipsis where the column is narrower than the value; the
    whole value in its title. Several in one cell stack as lines."""
    css = "memproc-clip memproc-quiet" if quiet else "memproc-clip"
    if url:
        return format_html('<a class="{}" href="{}" title="{}">{}</a>', css, url, value, value)
    return format_html('<span class="{}" title="{}">{}</span>', css, value, value)


def clamped(text: str) -> SafeString:
    """Prose in a cell: wrapped at words, at most three lines, the whole text in its title."""
    return format_html('<span class="memproc-clamp" title="{}">{}</span>', text, text)


def nowrap(text: Any) -> SafeString:
    """A short value that reads badly when wrapped ("12 tokens"), on one line."""
    return format_html('<span class="memproc-nowrap">{}</span>', text)


def stacked(*lines: Any) -> SafeString:
    """Values of one cell, each on its own line; empty ones left out."""
    kept = ((line,) for line in lines if line not in (None, ""))
    return format_html_join("", '<span class="memproc-line">{}</span>', kept)


def list_time(value: datetime | None) -> SafeString | str:
    """A time in a list, on one line ("2024-11-05 14:32"), the full date in its title."""
    if value is None:
        return "—"
    local = timezone.localtime(value)
    return format_html(
        '<time class="memproc-time" datetime="{}" title="{}">{}</time>',
        local.isoformat(),
        date_format(local, "DATETIME_FORMAT"),
        date_format(local, "Y-m-d H:i"),
    )


def thread_lines(key: str, *, linked: bool = True, anchor: str = "") -> SafeString | str:
    """A thread named in a list: its id (a link to its page, or to `anchor` on it) and, below, its
    resource's id (a link to the resource)."""
    if not key:
        return "—"
    resource_id, thread_id = split_thread_key(key)
    url = admin_url("thread", key) if linked else None
    thread = clipped(thread_id, url=f"{url}{anchor}" if url else None)
    if not linked:
        thread = stacked(thread, format_html('<span class="memproc-quiet">({})</span>', _("not stored")))
    if not resource_id:
        return thread
    return stacked(thread, clipped(resource_id, url=admin_url("resource", resource_id), quiet=True))


def thread_lines_of(obj: Any) -> SafeString | str:
    """`thread_lines` of a row that names its thread by (resource id, thread id), as tripwire logs and
    turn records do; linked when the list found the thread stored (`thread_exists`)."""
    if not obj.thread_id:
        return (
            clipped(obj.resource_id, url=admin_url("resource", obj.resource_id)) if obj.resource_id else "—"
        )
    key = thread_key(obj.resource_id, obj.thread_id)
    return thread_lines(key, linked=getattr(obj, "thread_exists", True))
