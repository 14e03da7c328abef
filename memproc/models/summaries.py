"""Thread summaries (compaction) and their revisions."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from memproc.models.threads import Thread, public_thread_id


class ThreadSummary(models.Model):
    """The running summary of a long thread (`Memory(compaction=...)`): what the messages up to
    `covered_sequence` said, folded in by the compaction job. It enters the prompt as one system
    message before history, and the messages it covers are not loaded as history again (they stay
    stored, and in recall). `version` is bumped by every change (compare-and-swap); a compaction job
    holds the thread with `claim_token` until `claimed_until`, so one job folds a thread at a time.
    `counted_through`/`counted_tokens`: the uncovered messages through that sequence hold that many
    tokens (a job counted them and found too few to fold)."""

    thread = models.OneToOneField(Thread, primary_key=True, on_delete=models.CASCADE, related_name="summary")
    text = models.TextField(blank=True, default="")
    covered_sequence = models.BigIntegerField(
        default=0, help_text=_("Messages up to this sequence are folded into the summary.")
    )
    token_count = models.PositiveIntegerField(default=0)
    # A job that found too little to fold notes what it counted, so turns estimate the rest only.
    counted_through = models.BigIntegerField(default=0, editable=False)
    counted_tokens = models.PositiveIntegerField(default=0, editable=False)
    version = models.PositiveIntegerField(default=0, editable=False)
    claim_token = models.UUIDField(null=True, blank=True, editable=False)
    claimed_until = models.DateTimeField(null=True, blank=True, editable=False)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-updated_at"]
        verbose_name_plural = _("thread summaries")

    def __str__(self) -> str:
        thread = public_thread_id(self.thread_id)
        return f"Summary of {thread} through #{self.covered_sequence} (v{self.version})"


class SummaryRevision(models.Model):
    """Every change of a thread summary: a fold by the compaction job (the messages after
    `previous_sequence` through `covered_sequence`, the summarizer, its cost) or an edit."""

    class Source(models.TextChoices):
        COMPACTION = "compaction", _("Compaction")
        ADMIN = "admin", _("Admin")
        CODE = "code", _("Code")

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    thread = models.ForeignKey(Thread, on_delete=models.CASCADE, related_name="summary_revisions")
    version = models.PositiveIntegerField()
    text = models.TextField(blank=True, default="")
    previous_sequence = models.BigIntegerField(default=0)
    covered_sequence = models.BigIntegerField(default=0)
    token_count = models.PositiveIntegerField(default=0)
    folded_messages = models.PositiveIntegerField(default=0)
    folded_tokens = models.PositiveIntegerField(default=0)
    source = models.CharField(max_length=16, choices=Source.choices)
    summarizer = models.CharField(max_length=255, blank=True, default="")
    duration_ms = models.FloatField(default=0.0)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,  # see USER_LINK in memproc.models
        db_constraint=False,
        related_name="memproc_summary_revisions",
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["thread", "version"], name="memproc_sumrev_thread_version"),
        ]

    def __str__(self) -> str:
        return f"{public_thread_id(self.thread_id)} summary v{self.version}"
