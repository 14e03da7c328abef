"""Small helpers shared by memproc's admin pages: links, JSON display, read-only bases."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin
from django.contrib.admin.utils import quote
from django.db.models import Exists, OuterRef
from django.http import HttpRequest
from django.urls import NoReverseMatch, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext_lazy as _

from memproc.models import Thread

# Tool arguments and results can be huge; the admin shows the head and says it cut the rest.
JSON_DISPLAY_CHARS = 20_000

ADMIN_MEDIA_CSS = {"all": ("memproc/admin.css", "memproc/turns.css")}


def admin_url(model_name: str, pk: Any, *, view: str = "change") -> str | None:
    try:
        return reverse(f"admin:memproc_{model_name}_{view}", args=[quote(pk)])
    except NoReverseMatch:  # the model is not registered on this site
        return None


def changelist_url(model_name: str, query: str = "") -> str:
    url = reverse(f"admin:memproc_{model_name}_changelist")
    return f"{url}?{query}" if query else url


def admin_link(model_name: str, pk: Any, label: Any = None) -> SafeString | str:
    """A link to the object's admin page, or just its label when there is no page."""
    if pk in (None, ""):
        return "—"
    url = admin_url(model_name, pk)
    text = pk if label is None else label
    return format_html('<a href="{}">{}</a>', url, text) if url else str(text)


def pretty_json(value: Any, *, limit: int = JSON_DISPLAY_CHARS) -> tuple[str, bool]:
    """Indented JSON (strings as they are), cut at `limit` characters. Returns (text, truncated)."""
    if isinstance(value, str):
        text = value
    else:
        text = json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False, default=str)
    if len(text) > limit:
        return text[:limit], True
    return text, False


def one_line(value: Any, *, limit: int = 80) -> str:
    """A compact one-line preview of a value for a <summary> or a list column."""
    if isinstance(value, str):
        text = " ".join(value.split())
    else:
        text = json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


class ReadOnlyAdmin(admin.ModelAdmin):
    """For rows memproc writes itself: operators read them, never add or edit them by hand."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class StoredThreadMixin:
    """For rows that name a thread by a plain id (turn records, tripwire logs): a blocked first turn
    never stored its thread, so the thread is linked only where it exists (one EXISTS per list)."""

    def get_queryset(self, request: HttpRequest) -> Any:
        thread_exists = Exists(Thread.objects.filter(pk=OuterRef("thread_id")))
        return super().get_queryset(request).annotate(thread_exists=thread_exists)  # type: ignore[misc]

    @admin.display(description=_("Thread"), ordering="thread_id")
    def thread(self, obj: Any) -> Any:
        if not obj.thread_id:
            return "—"
        if getattr(obj, "thread_exists", False):
            return admin_link("thread", obj.thread_id)
        return format_html('{} <span class="memproc-quiet">({})</span>', obj.thread_id, _("not stored"))
