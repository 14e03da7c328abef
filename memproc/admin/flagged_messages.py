"""The messages guardrails quarantined, on pages under the tripwire log's admin: the list of flags
(with its count on the log list) and one message's flag, confirmed or cleared through
`message_quarantine_review`."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.translation import gettext_lazy as _

from memproc import models
from memproc.admin.common import admin_url, thread_label
from memproc.admin.review_forms import FlagReviewForm
from memproc.admin.transcript import flag_review_url, highlighted, message_views
from memproc.services.quarantine import STATUSES as FLAG_STATUSES
from memproc.services.quarantine import message_quarantine_review, quarantine_flag

FLAGGED_TEMPLATE = "admin/memproc/tripwirelog/flagged_messages.html"
FLAG_REVIEW_TEMPLATE = "admin/memproc/tripwirelog/message_flag.html"
FLAGGED_PAGE_SIZE = 100
FLAG_LABELS = {"flagged": _("Flagged"), "confirmed": _("Confirmed"), "cleared": _("Cleared")}


class FlaggedMessagesMixin:
    """For the tripwire log's admin: the flagged-messages pages, their URLs and the count its list
    links them with. Reading them takes the view permission on tripwire logs and on threads; a verdict
    on a flag, the admin's review permission (`has_review_permission`)."""

    def get_urls(self) -> list[URLPattern]:
        info = self.opts.app_label, self.opts.model_name
        flagged = path(
            "flagged-messages/",
            self.admin_site.admin_view(self.flagged_messages_view),
            name="{}_{}_flagged_messages".format(*info),
        )
        flag = path(
            "flagged-messages/<memproc_thread_key:message_id>/",
            self.admin_site.admin_view(self.message_flag_view),
            name="{}_{}_message_flag".format(*info),
        )
        return [flagged, flag, *super().get_urls()]  # type: ignore[misc]

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        flagged = models.Message.objects.filter(quarantined=True).count()  # the partial index
        return super().changelist_view(  # type: ignore[misc]
            request, {**(extra_context or {}), "flagged_message_count": flagged}
        )

    def _can_read_messages(self, request: HttpRequest) -> bool:
        return self.has_view_permission(request) and request.user.has_perm(
            f"{self.opts.app_label}.view_thread"
        )

    def flagged_messages_view(self, request: HttpRequest) -> TemplateResponse:
        """The messages guardrails flagged: active flags (the partial index), or by status."""
        if not self._can_read_messages(request):
            raise PermissionDenied
        status = request.GET.get("status", "")
        rows = models.Message.objects.all()
        if status in FLAG_STATUSES:
            rows = rows.filter(content__metadata__quarantine__status=status)
        elif status == "all":
            rows = rows.filter(content__metadata__has_key="quarantine")
        else:
            status, rows = "", rows.filter(quarantined=True)
        rows = rows.order_by("-created_at").values(
            "id", "public_id", "thread_id", "resource_id", "role", "content", "text", "created_at"
        )
        entries = [_flag_entry(row) for row in rows[:FLAGGED_PAGE_SIZE]]
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": _("Flagged messages"),
            "entries": entries,
            "status": status,
            "statuses": [("", _("Quarantined")), *FLAG_LABELS.items(), ("all", _("All"))],
            "page_size": FLAGGED_PAGE_SIZE,
            "media": self.media,
        }
        return TemplateResponse(request, FLAGGED_TEMPLATE, context)

    def message_flag_view(self, request: HttpRequest, message_id: str) -> HttpResponse:
        """One message: its flag, the text with the flagged stretches marked, and the verdict form."""
        if not self._can_read_messages(request):
            raise PermissionDenied
        message = models.Message.objects.filter(pk=unquote(message_id)).first()
        if message is None:
            self.message_user(request, _("That message does not exist (any more)."), messages.WARNING)
            return HttpResponseRedirect(
                reverse(f"admin:{self.opts.app_label}_{self.opts.model_name}_flagged_messages")
            )
        flag = quarantine_flag(message) or {}
        can_review = self.has_review_permission(request)
        initial = {
            "status": "confirmed" if flag.get("status") in (None, "flagged") else flag["status"],
            "note": flag.get("note", ""),
        }
        form = FlagReviewForm(request.POST if request.method == "POST" else None, initial=initial)
        if request.method == "POST":
            if not can_review:
                raise PermissionDenied
            if form.is_valid():
                status = form.cleaned_data["status"]
                message_quarantine_review(
                    message=message, status=status, reviewer=request.user, note=form.cleaned_data["note"]
                )
                self.message_user(
                    request,
                    _("Message flag set to %(status)s.") % {"status": FLAG_LABELS[status]},
                    messages.SUCCESS,
                )
                return HttpResponseRedirect(
                    reverse(f"admin:{self.opts.app_label}_{self.opts.model_name}_flagged_messages")
                )
        row = {
            "id": message.pk,
            "public_id": message.public_id,
            "role": message.role,
            "content": message.content,
            "created_at": message.created_at,
            "sequence": message.sequence,
            "token_count": message.token_count,
        }
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": _("Review a message flag"),
            "entry": _flag_entry(
                {
                    **row,
                    "thread_id": message.thread_id,
                    "resource_id": message.resource_id,
                    "text": message.text,
                }
            ),
            "entries": message_views([row], resource_id=message.resource_id),
            "flag": flag,
            "form": form if can_review else None,
            "media": self.media + form.media,
        }
        return TemplateResponse(request, FLAG_REVIEW_TEMPLATE, context)


def _flag_entry(row: dict[str, Any]) -> dict[str, Any]:
    """What the flagged-messages page shows of one message."""
    flag = ((row.get("content") or {}).get("metadata") or {}).get("quarantine")
    flag = flag if isinstance(flag, dict) else {}
    text = row.get("text") or ""
    spans = flag.get("spans")
    excerpt = highlighted(text, spans) if spans else (text if len(text) <= 300 else text[:299] + "…")
    key = row.get("thread_id") or ""  # the message's thread: a key
    thread_url = admin_url("thread", key) if key else None
    public_id = row.get("public_id") or models.public_message_id(row["id"])
    return {
        "id": public_id,
        "role": row.get("role"),
        "created_at": row.get("created_at"),
        "thread_id": models.public_thread_id(key),
        "thread_label": thread_label(key),
        "resource_id": row.get("resource_id"),
        "thread_url": f"{thread_url}#message-{public_id}" if thread_url else None,
        "flag": flag,
        "status_label": FLAG_LABELS.get(flag.get("status"), flag.get("status") or "—"),
        "excerpt": excerpt,
        "review_url": flag_review_url(row["id"]),
    }
