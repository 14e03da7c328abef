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
from memproc.admin.cells import clipped, list_time, stacked
from memproc.admin.common import ADMIN_MEDIA_CSS, ReadOnlyAdmin, admin_url, thread_admin_link, thread_label
from memproc.vectors.pgvector_maintenance import index_status


@admin.register(models.MessageEmbedding)
class MessageEmbeddingAdmin(ReadOnlyAdmin):
    list_display = ("id", "message_link", "embedder", "dimensions", "created")
    list_filter = ("model", "dimensions", "created_at")
    search_fields = ("=message__public_id", "=thread_id", "=resource_id")
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

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> Any:
        """The list, under each embedder's HNSW index state (PostgreSQL; nothing elsewhere): where an
        operator looks when recall is slow or a build seems stuck."""
        context = dict(extra_context or {})
        if self.has_view_or_change_permission(request):
            context["vector_indexes"] = index_status()
        return super().changelist_view(request, context)

    class Media:
        css = ADMIN_MEDIA_CSS

    @admin.display(description=_("Message"), ordering="message_id")
    def message_link(self, obj: models.MessageEmbedding) -> SafeString:
        """The message (a link into its transcript) over its thread and resource."""
        key = _thread_key(obj)
        message_id = models.public_message_id(obj.message_id)
        url = f"{admin_url('thread', key)}#message-{message_id}"
        return stacked(clipped(message_id, url=url), clipped(thread_label(key), quiet=True))

    @admin.display(description=_("Model"), ordering="model")
    def embedder(self, obj: models.MessageEmbedding) -> SafeString:
        chunk = format_html('<span class="memproc-quiet">{}</span>', _("chunk %(n)s") % {"n": obj.chunk})
        return stacked(clipped(obj.model), chunk if obj.chunk else None)

    @admin.display(description=_("Created"), ordering="created_at")
    def created(self, obj: models.MessageEmbedding) -> SafeString | str:
        return list_time(obj.created_at)

    @admin.display(description=_("Thread"))
    def thread(self, obj: models.MessageEmbedding) -> Any:
        return thread_admin_link(_thread_key(obj))


def _thread_key(obj: models.MessageEmbedding) -> str:
    """An embedding names its thread by (resource id, thread id); the thread's page is under its key."""
    return models.thread_key(obj.resource_id, obj.thread_id)
