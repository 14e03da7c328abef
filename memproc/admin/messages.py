"""Messages: searched in a list, read in their thread, never edited."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.loader import render_to_string
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext_lazy as _

from memproc import models
from memproc.admin.cells import clamped, clipped, list_time, stacked, thread_lines
from memproc.admin.common import ADMIN_MEDIA_CSS, ReadOnlyAdmin, ThreadKeyPkMixin, one_line
from memproc.admin.threads import deletion_summary
from memproc.admin.transcript import message_views
from memproc.services.messages import messages_delete

# A message's text in the list: its head, wrapped to three lines, the same head in the title.
EXCERPT_CHARS = 300


@admin.register(models.Message)
class MessageAdmin(ThreadKeyPkMixin, ReadOnlyAdmin):
    """Never edited: messages are the record of what was said. Search them here, read them in the thread;
    a delete goes through `messages_delete`. Their pk is a key like a thread's (`models.message_key`),
    so their URLs write its separator as threads' do."""

    thread_id_lookup = "public_id"  # an admin URL from before keys names the bare message id

    # Four columns that fit beside the navigation and the filters at 1280 px.
    list_display = ("created", "thread_link", "excerpt", "tokens")
    list_filter = ("role", "created_at")
    search_fields = ("=public_id", "=thread__public_id", "text")
    search_help_text = _("Message id or thread id (exact), or text.")
    raw_id_fields = ("thread",)
    list_per_page = 100
    fields = (
        "public_id",
        "thread_link",
        "resource_id",
        "role",
        "sequence",
        "created_at",
        "token_count",
        "rendered",
    )
    readonly_fields = fields

    class Media:
        css = ADMIN_MEDIA_CSS

    def get_queryset(self, request: HttpRequest) -> QuerySet[models.Message]:
        # The list needs the text, not the parts; the change page loads `content` when it renders.
        return super().get_queryset(request).defer("content").order_by("-created_at")

    def delete_model(self, request: HttpRequest, obj: models.Message) -> None:
        messages_delete(message_keys=[obj.pk])  # and the attachment files no other message uses

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[models.Message]) -> None:
        messages_delete(message_keys=list(queryset.values_list("pk", flat=True)))

    def get_deleted_objects(self, objs: Any, request: HttpRequest) -> Any:
        ids = [obj.pk for obj in objs]
        counts = {
            _("messages"): len(ids),
            _("message embeddings"): models.MessageEmbedding.objects.filter(message_id__in=ids).count(),
        }
        return deletion_summary(objs, {k: v for k, v in counts.items() if v})

    @admin.display(description=_("Message"), ordering="created_at")
    def created(self, obj: models.Message) -> SafeString:
        return stacked(list_time(obj.created_at), clipped(obj.public_id, quiet=True))

    @admin.display(description=_("Thread"), ordering="thread_id")
    def thread_link(self, obj: models.Message) -> SafeString | str:
        return thread_lines(obj.thread_id, anchor=f"#message-{obj.public_id}")

    @admin.display(description=_("Tokens"), ordering="token_count")
    def tokens(self, obj: models.Message) -> Any:
        return "—" if obj.token_count is None else obj.token_count

    @admin.display(description=_("Text"))
    def excerpt(self, obj: models.Message) -> SafeString:
        role = format_html('<span class="memproc-role">{}</span>', obj.get_role_display())
        return stacked(role, clamped(one_line(obj.text, limit=EXCERPT_CHARS)) if obj.text else None)

    @admin.display(description=_("Message"))
    def rendered(self, obj: models.Message) -> SafeString:
        views = message_views(
            [
                {
                    "public_id": obj.public_id,
                    "role": obj.role,
                    "content": obj.content,
                    "created_at": obj.created_at,
                    "token_count": obj.token_count,
                    "sequence": obj.sequence,
                }
            ],
            resource_id=obj.resource_id,
        )
        return render_to_string("admin/memproc/includes/messages.html", {"entries": views})
