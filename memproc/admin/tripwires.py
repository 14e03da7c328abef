"""The review queue: blocked turns (read-only logs, reviewed through `tripwire_review`) and the
messages guardrails quarantined (confirmed or cleared through `message_quarantine_review`, on pages
of their own: `memproc.admin.flagged_messages`)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from memproc import models
from memproc.admin.cells import clamped, clipped, list_time, stacked, thread_lines_of
from memproc.admin.common import (
    ADMIN_MEDIA_CSS,
    ReadOnlyAdmin,
    StoredThreadMixin,
    UserLinksMixin,
    admin_link,
    admin_url,
    pretty_json,
)
from memproc.admin.flagged_messages import FlaggedMessagesMixin
from memproc.admin.review_forms import ReviewForm, ReviewNoteForm
from memproc.admin.transcript import highlighted, message_views
from memproc.db import memproc_db
from memproc.services.tripwires import tripwire_review

Status = models.TripwireLog.Status
REVIEW_TEMPLATE = "admin/memproc/tripwirelog/review.html"
# The intermediate page lists this many of the selected logs; the rest are reviewed all the same.
REVIEW_LIST_LIMIT = 50
# Which channel a block came from when a guardrail did not say (every hook reads one channel).
PHASE_CHANNELS = {
    "input": "input",
    "input_step": "input",
    "output_step": "output",
    "tool_result": "tool_result",
    "output": "output",
    "stream": "stream",
}


@admin.register(models.TripwireLog)
class TripwireLogAdmin(UserLinksMixin, StoredThreadMixin, FlaggedMessagesMixin, ReadOnlyAdmin):
    # Three columns that fit beside the navigation and the filters at 1280 px: when and its review,
    # which guardrail and why, where (agent, thread, resource). The time links to the log.
    list_display = ("blocked", "reason_excerpt", "where")
    list_display_links = None
    list_filter = ("status", "agent_id", "processor_id", "phase", "resource_id", "retry", "created_at")
    user_links = ("reviewed_by",)
    search_fields = ("reason", "=resource_id", "=thread_id", "=agent_id", "=processor_id")
    search_help_text = _("Text of the reason, or a resource, thread, agent or processor id (exact).")
    raw_id_fields = ("reviewed_by",)
    list_per_page = 50
    actions = ("mark_confirmed", "mark_false_positive")
    fieldsets = (
        (
            _("Blocked turn"),
            {
                "fields": (
                    "created_at",
                    "agent_id",
                    "processor_id",
                    "phase",
                    "reason",
                    "retry",
                    "thread",
                    "resource",
                )
            },
        ),
        (_("Blocked content"), {"fields": ("channel", "flagged_text", "blocked_content")}),
        (_("Metadata"), {"fields": ("metadata_json",)}),
        (_("Review"), {"fields": ("status_badge", "reviewed_by", "reviewed_at", "note")}),
    )
    readonly_fields = (
        "created_at",
        "agent_id",
        "processor_id",
        "phase",
        "reason",
        "retry",
        "thread",
        "resource",
        "blocked_content",
        "channel",
        "flagged_text",
        "metadata_json",
        "status_badge",
        "reviewed_by",
        "reviewed_at",
        "note",
    )

    class Media:
        css = ADMIN_MEDIA_CSS

    def has_review_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(f"{self.opts.app_label}.change_{self.opts.model_name}")

    def get_urls(self) -> list[URLPattern]:
        info = self.opts.app_label, self.opts.model_name
        review = path(
            "<path:object_id>/review/",
            self.admin_site.admin_view(self.review_view),
            name="{}_{}_review".format(*info),
        )
        return [review, *super().get_urls()]  # then the flagged-messages pages' (FlaggedMessagesMixin)

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        extra_context = {**(extra_context or {}), "can_review": self.has_review_permission(request)}
        return super().change_view(request, object_id, form_url, extra_context)

    # --- reviewing --------------------------------------------------------------------------------

    @admin.action(description=_("Mark selected as confirmed (the block was right)"), permissions=["review"])
    def mark_confirmed(self, request: HttpRequest, queryset: QuerySet[models.TripwireLog]) -> Any:
        return self._review_selected(request, queryset, status=Status.CONFIRMED, action="mark_confirmed")

    @admin.action(
        description=_("Mark selected as false positive (the block was wrong)"), permissions=["review"]
    )
    def mark_false_positive(self, request: HttpRequest, queryset: QuerySet[models.TripwireLog]) -> Any:
        return self._review_selected(
            request, queryset, status=Status.FALSE_POSITIVE, action="mark_false_positive"
        )

    def _review_selected(
        self, request: HttpRequest, queryset: QuerySet[models.TripwireLog], *, status: str, action: str
    ) -> HttpResponse | None:
        """Shows a page asking for a note; its submit comes back here with `post` and applies the review."""
        form = ReviewNoteForm(request.POST if request.POST.get("post") else None)
        if form.is_valid():
            count = self._apply_review(request, list(queryset), status=status, note=form.cleaned_data["note"])
            self.message_user(
                request,
                ngettext(
                    "%(count)d blocked turn marked %(status)s.",
                    "%(count)d blocked turns marked %(status)s.",
                    count,
                )
                % {"count": count, "status": Status(status).label.lower()},
                messages.SUCCESS,
            )
            return None  # back to the changelist
        pks = list(queryset.values_list("pk", flat=True))
        return self._render_review(
            request,
            form=form,
            logs=queryset[:REVIEW_LIST_LIMIT],
            total=len(pks),
            status=status,
            action=action,
            selected=pks,
        )

    def review_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """One log's review page: the verdict and a note."""
        log = self.get_object(request, unquote(object_id))
        if log is None:
            return self._get_obj_does_not_exist_redirect(request, self.opts, object_id)
        if not self.has_review_permission(request):
            raise PermissionDenied
        initial = {
            "status": Status.CONFIRMED if log.status == Status.PENDING else log.status,
            "note": log.note,
        }
        form = ReviewForm(request.POST if request.method == "POST" else None, initial=initial)
        if form.is_valid():
            status = form.cleaned_data["status"]
            self._apply_review(request, [log], status=status, note=form.cleaned_data["note"])
            self.message_user(
                request,
                _("Blocked turn marked %(status)s.") % {"status": Status(status).label.lower()},
                messages.SUCCESS,
            )
            return HttpResponseRedirect(
                reverse(f"admin:{self.opts.app_label}_{self.opts.model_name}_changelist")
            )
        blocked = {"flagged_text": flagged_text(log), "messages": self.blocked_content(log)}
        return self._render_review(
            request, form=form, logs=[log], total=1, status=None, action=None, selected=[], blocked=blocked
        )

    def _apply_review(
        self, request: HttpRequest, logs: list[models.TripwireLog], *, status: str, note: str
    ) -> int:
        with transaction.atomic(using=memproc_db()):
            for log in logs:
                tripwire_review(log=log, status=status, reviewer=request.user, note=note)
                self.log_change(
                    request, log, f"Reviewed: {Status(status).label}" + (f" — {note}" if note else "")
                )
        return len(logs)

    def _render_review(
        self,
        request: HttpRequest,
        *,
        form: forms.Form,
        logs: Any,
        total: int,
        status: str | None,
        action: str | None,
        selected: list[Any],
        blocked: dict[str, Any] | None = None,
    ) -> TemplateResponse:
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": _("Review blocked turns") if action else _("Review blocked turn"),
            "form": form,
            "logs": logs,
            "total": total,
            "status_label": Status(status).label if status else "",
            "action": action,
            "selected": selected,
            "blocked": blocked,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "media": self.media + form.media,
        }
        return TemplateResponse(request, REVIEW_TEMPLATE, context)

    # --- display ----------------------------------------------------------------------------------

    @admin.display(description=_("Status"), ordering="status")
    def status_badge(self, obj: models.TripwireLog) -> SafeString:
        return format_html(
            '<span class="memproc-badge memproc-status-{}">{}</span>', obj.status, obj.get_status_display()
        )

    @admin.display(description=_("Channel"))
    def channel(self, obj: models.TripwireLog) -> str:
        """What the guardrail was reading: its own word for it, else the hook's (input, tool result...)."""
        named = (obj.metadata or {}).get("channel") if isinstance(obj.metadata, dict) else None
        return str(named or PHASE_CHANNELS.get(obj.phase, obj.phase)).replace("_", " ")

    @admin.display(description=_("Flagged text"))
    def flagged_text(self, obj: models.TripwireLog) -> SafeString | str:
        return flagged_text(obj) or "—"

    @admin.display(description=_("Blocked"), ordering="created_at")
    def blocked(self, obj: models.TripwireLog) -> SafeString:
        reviewer = obj.reviewed_by
        return stacked(
            format_html('<a href="{}">{}</a>', admin_url("tripwirelog", obj.pk), list_time(obj.created_at)),
            self.status_badge(obj),
            clipped(_("by %(user)s") % {"user": reviewer}, quiet=True) if reviewer else None,
        )

    @admin.display(description=_("Reason"))
    def reason_excerpt(self, obj: models.TripwireLog) -> SafeString:
        """The guardrail and the hook it blocked in, then the reason."""
        phase, channel = obj.get_phase_display(), self.channel(obj)
        hook = phase if channel.lower() == phase.lower() else f"{phase}, {channel}"
        guardrail = format_html('<span class="memproc-quiet">{} · {}</span>', obj.processor_id, hook)
        return stacked(guardrail, clamped(obj.reason))

    @admin.display(description=_("Where"), ordering="thread_id")
    def where(self, obj: models.TripwireLog) -> SafeString:
        return stacked(clipped(obj.agent_id) if obj.agent_id else None, thread_lines_of(obj))

    @admin.display(description=_("Resource"))
    def resource(self, obj: models.TripwireLog) -> Any:
        return admin_link("resource", obj.resource_id)

    @admin.display(description=_("Blocked messages"))
    def blocked_content(self, obj: models.TripwireLog) -> SafeString:
        if obj.content is None:
            return format_html(
                '<p class="memproc-quiet">{}</p>',
                _("Not stored: STORE_BLOCKED_CONTENT was off when this turn was blocked."),
            )
        rows = obj.content if isinstance(obj.content, list) else [obj.content]
        entries = message_views([r for r in rows if isinstance(r, dict)], resource_id=obj.resource_id)
        return render_to_string("admin/memproc/includes/messages.html", {"entries": entries})

    @admin.display(description=_("Metadata"))
    def metadata_json(self, obj: models.TripwireLog) -> SafeString:
        text, truncated = pretty_json(obj.metadata or {})
        return format_html('<pre class="memproc-pre">{}{}</pre>', text, "\n…" if truncated else "")


def flagged_text(log: models.TripwireLog) -> SafeString | None:
    """The blocked message's text with the stretches the guardrail flagged marked, when the
    metadata says where (`message_id` and `spans`) and the content was stored."""
    meta = log.metadata if isinstance(log.metadata, dict) else {}
    spans, message_id = meta.get("spans"), meta.get("message_id")
    rows = log.content if isinstance(log.content, list) else []
    row = next((r for r in rows if isinstance(r, dict) and r.get("id") == message_id), None)
    if not spans or row is None:
        return None
    text = "".join(
        str(p.get("text") or "")
        for p in row.get("parts") or []
        if isinstance(p, dict) and p.get("type") == "text"
    )
    return format_html('<div class="memproc-text">{}</div>', highlighted(text, spans))
