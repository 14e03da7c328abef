"""Idempotency records: the first answer to a request, replayed for its repeats."""

from __future__ import annotations

from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _


class IdempotencyRecord(models.Model):
    """The first answer to a request sent with an `Idempotency-Key`, replayed for its repeats.

    `scope` keeps callers apart (the caller and the endpoint), so two users' keys never meet;
    `request_hash` tells a repeat from a different body sent with the same key (422). The kept answer
    holds the user's messages: `resource_id` and `thread_id` (the thread id, within its resource) say
    whose they are, so purging a resource or deleting a thread deletes it too. `owner_*` name the
    process running a claim, so a repeat can tell that it died (`memproc.api.claim_owner`).
    """

    class State(models.TextChoices):
        RUNNING = "running", _("Running")
        DONE = "done", _("Done")

    id = models.BigAutoField(primary_key=True)
    scope = models.CharField(max_length=255)
    key = models.CharField(max_length=255)
    request_hash = models.CharField(max_length=64)
    state = models.CharField(max_length=16, choices=State.choices, default=State.RUNNING)
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    response = models.JSONField(null=True, blank=True)
    resource_id = models.CharField(max_length=255, blank=True, default="")
    thread_id = models.CharField(max_length=255, blank=True, default="")
    owner_host = models.CharField(max_length=255, blank=True, default="")
    owner_pid = models.PositiveIntegerField(null=True, blank=True)
    owner_started = models.BigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(db_index=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["scope", "key"], name="memproc_idem_scope_key"),
        ]
        indexes = [models.Index(fields=["resource_id", "thread_id"], name="memproc_idem_resource")]

    def __str__(self) -> str:
        return f"{self.scope} {self.key} ({self.state})"
