"""The outbox: background jobs that could not be sent yet (a broker outage, an embedder down)."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from memproc import models
from memproc.admin.common import ReadOnlyAdmin
from memproc.background import MAX_ATTEMPTS, outbox_dispatch


@admin.register(models.OutboxJob)
class OutboxJobAdmin(ReadOnlyAdmin):
    list_display = ("id", "task", "attempts", "parked", "next_attempt_at", "created_at", "last_error_short")
    list_filter = ("task",)
    list_per_page = 100
    fields = ("task", "kwargs", "attempts", "next_attempt_at", "last_error", "created_at")
    readonly_fields = fields
    actions = ["send_now"]

    @admin.display(description=_("Parked"), boolean=True)
    def parked(self, obj: models.OutboxJob) -> bool:
        return obj.attempts >= MAX_ATTEMPTS

    @admin.display(description=_("Last error"))
    def last_error_short(self, obj: models.OutboxJob) -> str:
        return obj.last_error[:80]

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
