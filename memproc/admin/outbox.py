"""The outbox: background jobs that could not be sent yet (a broker outage, an embedder down)."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext_lazy as _

from memproc import models
from memproc.admin.cells import clamped, clipped, list_time, stacked
from memproc.admin.common import ADMIN_MEDIA_CSS, ReadOnlyAdmin, one_line
from memproc.background import MAX_ATTEMPTS, outbox_dispatch


@admin.register(models.OutboxJob)
class OutboxJobAdmin(ReadOnlyAdmin):
    list_display = ("id", "task_name", "attempts_made", "next_attempt", "last_error_short")
    list_filter = ("task",)
    list_per_page = 100
    fields = ("task", "kwargs", "attempts", "next_attempt_at", "last_error", "created_at")
    readonly_fields = fields
    actions = ["send_now"]

    class Media:
        css = ADMIN_MEDIA_CSS

    @admin.display(description=_("Task"), ordering="task")
    def task_name(self, obj: models.OutboxJob) -> SafeString:
        return clipped(obj.task)

    @admin.display(description=_("Attempts"), ordering="attempts")
    def attempts_made(self, obj: models.OutboxJob) -> SafeString:
        """The count, and "parked" once the job has used every attempt (only "Send now" retries it)."""
        parked = obj.attempts >= MAX_ATTEMPTS
        badge = format_html('<span class="memproc-badge memproc-badge-warn">{}</span>', _("parked"))
        return stacked(obj.attempts, badge if parked else None)

    @admin.display(description=_("Next attempt"), ordering="next_attempt_at")
    def next_attempt(self, obj: models.OutboxJob) -> SafeString | str:
        return list_time(obj.next_attempt_at)

    @admin.display(description=_("Last error"))
    def last_error_short(self, obj: models.OutboxJob) -> SafeString | str:
        return clamped(one_line(obj.last_error, limit=300)) if obj.last_error else "—"

    @admin.action(description=_("Send the selected jobs now"))
    def send_now(self, request: HttpRequest, queryset: QuerySet[models.OutboxJob]) -> None:
        # Parked jobs get one more try; the rest keep their count. Only the selected jobs become due.
        queryset.filter(attempts__gte=MAX_ATTEMPTS).update(attempts=MAX_ATTEMPTS - 1)
        queryset.update(next_attempt_at=timezone.now())
        counts = outbox_dispatch(limit=queryset.count())
        level = messages.SUCCESS if not counts["failed"] else messages.WARNING
        self.message_user(
            request,
            _("Delivered %(delivered)d, failed %(failed)d.") % counts,
            level,
        )
