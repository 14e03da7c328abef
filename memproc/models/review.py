"""What operators review: tripwire logs (blocked input and output) and turn records."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _


class TripwireLog(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending", _("Pending")
        CONFIRMED = "confirmed", _("Confirmed")
        FALSE_POSITIVE = "false_positive", _("False positive")

    class Phase(models.TextChoices):
        INPUT = "input", _("Input")
        INPUT_STEP = "input_step", _("Input step")
        OUTPUT_STEP = "output_step", _("Output step")
        TOOL_RESULT = "tool_result", _("Tool result")
        OUTPUT = "output", _("Output")
        STREAM = "stream", _("Stream")

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    agent_id = models.CharField(max_length=255, blank=True, default="")
    processor_id = models.CharField(max_length=255)
    phase = models.CharField(max_length=16, choices=Phase.choices)
    reason = models.TextField()
    retry = models.BooleanField(default=False)
    metadata = models.JSONField(default=dict, blank=True)
    # Plain ids, not FKs: a blocked first turn has no stored thread, and a log outlives deletions.
    thread_id = models.CharField(max_length=255, blank=True, default="")  # beside resource_id
    resource_id = models.CharField(max_length=255, blank=True, default="")
    content = models.JSONField(null=True, blank=True, help_text=_("The blocked messages, if stored."))
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    reviewed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,  # see USER_LINK in memproc.models
        db_constraint=False,
        related_name="memproc_tripwire_reviews",
    )
    reviewed_at = models.DateTimeField(null=True, blank=True)
    note = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["status", "-created_at"], name="memproc_trip_status"),
            models.Index(fields=["agent_id", "-created_at"], name="memproc_trip_agent"),
            models.Index(fields=["processor_id", "-created_at"], name="memproc_trip_proc"),
            models.Index(fields=["resource_id", "-created_at"], name="memproc_trip_res"),
            models.Index(fields=["thread_id"], name="memproc_trip_thread"),
        ]

    def __str__(self) -> str:
        return f"{self.processor_id} ({self.phase}): {self.reason[:60]}"


class TurnRecord(models.Model):
    """One turn: how it ended, what it cost, and why the model saw what it saw (the manifest).

    The manifest holds ids and numbers, never message text: history ids, recalled ids with their
    score and source thread, the working memory's scope, key and version, token counts around the
    limiter, each processor hook's duration. Plain ids, not FKs, as for tripwire logs: a record
    outlives the messages it names and exists for turns that saved nothing.
    """

    class Status(models.TextChoices):
        COMPLETED = "completed", _("Completed")
        BLOCKED = "blocked", _("Blocked")
        FAILED = "failed", _("Failed")

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    agent_id = models.CharField(max_length=255, blank=True, default="")
    thread_id = models.CharField(max_length=255, blank=True, default="")  # beside resource_id
    resource_id = models.CharField(max_length=255, blank=True, default="")
    status = models.CharField(max_length=16, choices=Status.choices)
    model = models.CharField(max_length=255, blank=True, default="")
    steps = models.PositiveIntegerField(default=0)
    usage = models.JSONField(default=dict, blank=True)
    manifest = models.JSONField(default=dict, blank=True)
    # The reply this turn saved (completed turns), so the transcript can show the manifest under it.
    message_ids = models.JSONField(default=list, blank=True)
    tripwire = models.ForeignKey(
        TripwireLog, null=True, blank=True, on_delete=models.SET_NULL, related_name="turn_records"
    )
    error = models.CharField(
        max_length=255, blank=True, default="", help_text=_("Error class of a failed turn.")
    )
    started_at = models.DateTimeField(default=timezone.now)
    duration_ms = models.FloatField(default=0.0)

    class Meta:
        ordering = ["-started_at"]
        indexes = [
            models.Index(fields=["thread_id", "started_at"], name="memproc_turn_thread"),
            models.Index(fields=["agent_id", "-started_at"], name="memproc_turn_agent"),
            models.Index(fields=["status", "-started_at"], name="memproc_turn_status"),
            models.Index(fields=["-started_at"], name="memproc_turn_started"),
            # The memory view's recent recalls of one resource.
            models.Index(fields=["resource_id", "-started_at"], name="memproc_turn_resource"),
        ]

    def __str__(self) -> str:
        return f"{self.agent_id} turn {self.status} ({self.duration_ms:.0f} ms)"
