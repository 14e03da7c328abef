"""Embeddings: which messages are indexed by which embedder. The vectors themselves are never loaded."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext_lazy as _

from memproc import models
from memproc.admin.common import ReadOnlyAdmin, admin_url, thread_admin_link


@admin.register(models.MessageEmbedding)
class MessageEmbeddingAdmin(ReadOnlyAdmin):
    list_display = ("id", "message_link", "chunk", "model", "dimensions", "resource_id", "created_at")
    list_filter = ("model", "dimensions", "created_at")
    search_fields = ("=message__id", "=thread_id", "=resource_id")
    search_help_text = _("Message, thread or resource id (exact).")
    raw_id_fields = ("message",)
    list_per_page = 100
    fields = (
        "message_link",
        "thread",
        "resource_id",
        "chunk",
        "model",
        "dimensions",
        "content_hash",
        "created_at",
    )
    readonly_fields = fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[models.MessageEmbedding]:
        return super().get_queryset(request).defer("vector")

    @admin.display(description=_("Message"), ordering="message_id")
    def message_link(self, obj: models.MessageEmbedding) -> SafeString:
        return format_html(
            '<a href="{}#message-{}">{}</a>',
            admin_url("thread", _thread_key(obj)),
            obj.message_id,
            obj.message_id,
        )

    @admin.display(description=_("Thread"))
    def thread(self, obj: models.MessageEmbedding) -> Any:
        return thread_admin_link(_thread_key(obj))


def _thread_key(obj: models.MessageEmbedding) -> str:
    """An embedding names its thread by (resource id, thread id); the thread's page is under its key."""
    return models.thread_key(obj.resource_id, obj.thread_id)
