"""Attachments: files offloaded to storage, previewed inline and opened as downloads (never as pages of
the site: a client-sent file must not run with an operator's session)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import F, QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.template.defaultfilters import filesizeformat
from django.template.loader import render_to_string
from django.urls import URLPattern, path
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext_lazy as _

from memproc import models
from memproc.admin.cells import clipped, list_time, stacked, thread_lines
from memproc.admin.common import ADMIN_MEDIA_CSS, ReadOnlyAdmin
from memproc.admin.transcript import file_url
from memproc.exceptions import StorageUnavailable
from memproc.services.attachments import attachment_delete, attachment_download_response

TEXT_PREVIEW_BYTES = 4096
TEXT_TYPES = ("application/json", "application/xml", "application/x-yaml", "application/yaml")


def is_text(content_type: str) -> bool:
    base = content_type.split(";", 1)[0].strip().lower()
    return base.startswith("text/") or base in TEXT_TYPES or base.endswith(("+json", "+xml"))


def is_image(content_type: str) -> bool:
    return content_type.lower().startswith("image/")


def text_head(attachment: models.Attachment, limit: int = TEXT_PREVIEW_BYTES) -> tuple[str | None, str]:
    """The first `limit` bytes of a text file, decoded. Returns (text, error); a missing file is an error."""
    try:
        with attachment.file.open("rb") as handle:
            data = handle.read(limit)
    except Exception as exc:  # missing file, storage down: say so on the page
        return None, f"{type(exc).__name__}: {exc}"
    return data.decode("utf-8", errors="replace"), ""


def storage_name(attachment: models.Attachment) -> str:
    storage = attachment.file.storage
    cls = storage.__class__  # LazyObject proxies __class__ to the storage it wraps
    return f"{cls.__module__}.{cls.__qualname__}"


@admin.register(models.Attachment)
class AttachmentAdmin(ReadOnlyAdmin):
    # Four columns that fit beside the navigation and the filters at 1280 px.
    list_display = ("file_name", "message_link", "stored", "created")
    list_filter = ("content_type", "created_at")
    search_fields = ("name", "=sha256", "=resource_id", "=message__public_id")
    search_help_text = _("File name, or sha256, resource id or message id (exact).")
    raw_id_fields = ("message",)
    list_per_page = 50
    fields = (
        "preview",
        "name",
        "content_type",
        "human_size",
        "sha256",
        "resource_id",
        "message_link",
        "storage",
        "file_link",
        "created_at",
    )
    readonly_fields = fields

    class Media:
        css = ADMIN_MEDIA_CSS

    def get_queryset(self, request: HttpRequest) -> QuerySet[models.Attachment]:
        # The message's thread key only, not the message row with its content.
        return super().get_queryset(request).annotate(thread_ref=F("message__thread_id"))

    def get_urls(self) -> list[URLPattern]:
        download = path(
            "<path:object_id>/download/",
            self.admin_site.admin_view(self.download_view),
            name=f"{self.opts.app_label}_{self.opts.model_name}_download",
        )
        return [download, *super().get_urls()]

    def download_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """The file as a download, for whoever may view attachments here."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        attachment = self.get_object(request, object_id)
        if attachment is None or not attachment.file:
            raise Http404
        try:
            return attachment_download_response(attachment)
        except StorageUnavailable as exc:
            return HttpResponse(str(exc), status=503, content_type="text/plain; charset=utf-8")

    def delete_model(self, request: HttpRequest, obj: models.Attachment) -> None:
        attachment_delete(attachment=obj)  # removes the file from storage after commit

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[models.Attachment]) -> None:
        for attachment in queryset:
            attachment_delete(attachment=attachment)

    @admin.display(description=_("File"), ordering="name")
    def file_name(self, obj: models.Attachment) -> SafeString:
        """The name over its type and size."""
        kind = format_html(
            '<span class="memproc-quiet">{} · {}</span>', obj.content_type, self.human_size(obj)
        )
        return stacked(clipped(obj.name), kind)

    @admin.display(description=_("Stored"))
    def stored(self, obj: models.Attachment) -> SafeString:
        """The content's sha256 over the storage that holds it."""
        return stacked(self.sha256_short(obj), clipped(self.storage(obj), quiet=True))

    @admin.display(description=_("Created"), ordering="created_at")
    def created(self, obj: models.Attachment) -> SafeString | str:
        return list_time(obj.created_at)

    @admin.display(description=_("Size"), ordering="size")
    def human_size(self, obj: models.Attachment) -> str:
        return filesizeformat(obj.size)

    @admin.display(description=_("sha256"))
    def sha256_short(self, obj: models.Attachment) -> SafeString:
        return format_html('<code title="{}">{}</code>', obj.sha256, obj.sha256[:12])

    @admin.display(description=_("Message"))
    def message_link(self, obj: models.Attachment) -> Any:
        """The thread of the message it came with (a link to the message in its transcript)."""
        key = getattr(obj, "thread_ref", None)
        if not obj.message_id or not key:
            return _("not attached to a saved message")
        return thread_lines(key, anchor=f"#message-{models.public_message_id(obj.message_id)}")

    @admin.display(description=_("Storage"))
    def storage(self, obj: models.Attachment) -> str:
        return storage_name(obj).rsplit(".", 1)[-1]

    @admin.display(description=_("File"))
    def file_link(self, obj: models.Attachment) -> Any:
        url = file_url(obj)
        if not url:
            return format_html("<code>{}</code> ({})", obj.file.name, _("this storage gives no URL"))
        return format_html(
            '<a href="{}" target="_blank" rel="noopener">{}</a> <code>{}</code>',
            url,
            _("Open"),
            obj.file.name,
        )

    @admin.display(description=_("Preview"))
    def preview(self, obj: models.Attachment) -> SafeString:
        context: dict[str, Any] = {"attachment": obj, "url": file_url(obj), "limit": TEXT_PREVIEW_BYTES}
        if is_image(obj.content_type):
            context["kind"] = "image"
        elif is_text(obj.content_type):
            context["kind"] = "text"
            context["text"], context["error"] = text_head(obj)
            context["truncated"] = obj.size > TEXT_PREVIEW_BYTES
        else:
            context["kind"] = "other"
        return render_to_string("admin/memproc/attachment/preview.html", context)
