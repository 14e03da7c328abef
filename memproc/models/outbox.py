"""The outbox: background jobs written with the work that needs them."""

from __future__ import annotations

from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _


class OutboxJob(models.Model):
    """A background job written in the transaction of the work that needs it (the outbox).

    It is sent after commit and deleted once delivered (Celery accepted it, or inline mode ran it), so
    a broker that is down never fails a committed turn: the row stays, and `memproc_outbox` or the
    `memproc.outbox_dispatch` beat task sends it again later. Every task is idempotent, so a job sent
    twice (delivered, but the delete was lost) does no harm.
    """

    id = models.BigAutoField(primary_key=True)
    task = models.CharField(max_length=255, help_text=_("The task's wire name."))
    kwargs = models.JSONField(default=dict, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    last_error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["next_attempt_at"], name="memproc_outbox_due")]

    def __str__(self) -> str:
        return f"{self.task} #{self.pk} ({self.attempts} attempts)"
