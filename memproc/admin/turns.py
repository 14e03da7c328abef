"""Turn records: every turn's outcome, cost and manifest, read-only (memproc writes them)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.loader import render_to_string
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext_lazy as _

from memproc import models
from memproc.admin.cells import clipped, stacked, thread_lines_of
from memproc.admin.common import (
    ADMIN_MEDIA_CSS,
    ReadOnlyAdmin,
    StoredThreadMixin,
    admin_link,
    admin_url,
    pretty_json,
)
from memproc.admin.dashboard import TURN_DURATION_SAMPLE, percentile
from memproc.admin.manifest_fields import usage_tokens
from memproc.admin.turn_panels import record_view
from memproc.selectors.turns import turn_durations
from memproc.templatetags.memproc_admin import memproc_duration

SLOW_TURN_MS = 5_000


class SlowTurnsFilter(admin.SimpleListFilter):
    """Turns over a fixed time, or the slowest 5 % of the turns the other filters leave (their p95
    over the newest TURN_DURATION_SAMPLE, one query)."""

    title = _("slow turns")
    parameter_name = "slow"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [
            ("1s", _("Over 1 s")),
            ("5s", _("Over %(s)s s") % {"s": SLOW_TURN_MS // 1000}),
            ("p95", _("Slowest 5 % (above p95)")),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "1s":
            return queryset.filter(duration_ms__gt=1_000)
        if self.value() == "5s":
            return queryset.filter(duration_ms__gt=SLOW_TURN_MS)
        if self.value() == "p95":
            p95 = percentile(turn_durations(records=queryset, limit=TURN_DURATION_SAMPLE), 0.95)
            return queryset.filter(duration_ms__gte=p95) if p95 is not None else queryset
        return queryset


@admin.register(models.TurnRecord)
class TurnRecordAdmin(StoredThreadMixin, ReadOnlyAdmin):
    # Five columns that fit beside the navigation and the filters at 1280 px.
    list_display = ("started", "outcome", "where", "duration", "tokens")
    list_display_links = ("started",)
    list_filter = ("status", "agent_id", "model", SlowTurnsFilter)
    search_fields = ("=thread_id", "=resource_id")
    search_help_text = _("Thread or resource id (exact).")
    date_hierarchy = "started_at"
    list_per_page = 100
    show_full_result_count = False
    fieldsets = (
        (
            _("Turn"),
            {
                "fields": (
                    ("started_at", "duration"),
                    ("status_badge", "error"),
                    "agent_id",
                    "thread",
                    "resource",
                    ("model", "steps"),
                    "tripwire_link",
                )
            },
        ),
        (_("Why the model saw this"), {"fields": ("manifest_view",)}),
        (_("Raw record"), {"fields": ("usage_json", "manifest_json"), "classes": ("collapse",)}),
    )
    readonly_fields = (
        "started_at",
        "duration",
        "status_badge",
        "error",
        "agent_id",
        "thread",
        "resource",
        "model",
        "steps",
        "tripwire_link",
        "manifest_view",
        "usage_json",
        "manifest_json",
    )

    class Media:
        css = ADMIN_MEDIA_CSS

    # --- display ----------------------------------------------------------------------------------

    @admin.display(description=_("Started"), ordering="started_at")
    def started(self, obj: models.TurnRecord) -> SafeString:
        local = timezone.localtime(obj.started_at)
        return format_html('<span class="memproc-time">{}</span>', date_format(local, "Y-m-d H:i:s"))

    @admin.display(description=_("Outcome"), ordering="status")
    def outcome(self, obj: models.TurnRecord) -> SafeString:
        """The status, and the blocked turn's tripwire log."""
        if not obj.tripwire_id:
            return self.status_badge(obj)
        return format_html(
            '<span class="memproc-nowrap">{} {}</span>', self.status_badge(obj), self.tripwire_link(obj)
        )

    @admin.display(description=_("Where"), ordering="agent_id")
    def where(self, obj: models.TurnRecord) -> SafeString:
        return stacked(clipped(obj.agent_id) if obj.agent_id else None, thread_lines_of(obj))

    @admin.display(description=_("Status"), ordering="status")
    def status_badge(self, obj: models.TurnRecord) -> SafeString:
        return format_html(
            '<span class="memproc-badge memproc-turn-{}">{}</span>', obj.status, obj.get_status_display()
        )

    @admin.display(description=_("Duration"), ordering="duration_ms")
    def duration(self, obj: models.TurnRecord) -> str:
        return memproc_duration(obj.duration_ms)

    @admin.display(description=_("Tokens"))
    def tokens(self, obj: models.TurnRecord) -> Any:
        tokens = usage_tokens(obj.usage)
        return "—" if tokens is None else tokens

    @admin.display(description=_("Resource"), ordering="resource_id")
    def resource(self, obj: models.TurnRecord) -> Any:
        return admin_link("resource", obj.resource_id)

    @admin.display(description=_("Tripwire"))
    def tripwire_link(self, obj: models.TurnRecord) -> Any:
        if not obj.tripwire_id:
            return "—"
        return format_html(
            '<a class="memproc-badge memproc-badge-warn" href="{}">{}</a>',
            admin_url("tripwirelog", obj.tripwire_id) or "",
            _("log"),
        )

    @admin.display(description=_("Manifest"))
    def manifest_view(self, obj: models.TurnRecord) -> SafeString:
        return render_to_string("admin/memproc/includes/turn_details.html", {"turn": record_view(obj)})

    @admin.display(description=_("Usage (JSON)"))
    def usage_json(self, obj: models.TurnRecord) -> SafeString:
        text, truncated = pretty_json(obj.usage or {})
        return format_html('<pre class="memproc-pre">{}{}</pre>', text, "\n…" if truncated else "")

    @admin.display(description=_("Manifest (JSON)"))
    def manifest_json(self, obj: models.TurnRecord) -> SafeString:
        text, truncated = pretty_json(obj.manifest or {})
        return format_html('<pre class="memproc-pre">{}{}</pre>', text, "\n…" if truncated else "")
