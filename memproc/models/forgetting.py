"""What a forget did: a receipt that holds no forgotten text, only what proving it needs."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _


class ForgetReceipt(models.Model):
    """One `Memory.forget`: what went, and what `manage.py memproc_forget --verify` looks for.

    It keeps keyed fingerprints of the forgotten text (HMAC of its word n-grams, see
    memproc.services.forget.fingerprints), never the text itself, keyed digests of the forgotten
    messages' keys, and the forgotten files' paths and hashes (content-addressed: no text), so a
    later check can show that no row, vector or stored file holds them.
    """

    class Scope(models.TextChoices):
        MESSAGES = "messages", _("Messages")
        THREAD = "thread", _("Thread")
        RESOURCE = "resource", _("Resource")

    class Status(models.TextChoices):
        DONE = "done", _("Done")
        # Working memory a later revision built on: an operator decides (admin), then it is done.
        REVIEW = "review", _("Working memory held for review")

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    resource_id = models.CharField(max_length=255, db_index=True)
    scope = models.CharField(max_length=16, choices=Scope.choices)
    thread_id = models.CharField(max_length=255, blank=True, default="")  # public; scope "thread"
    cascade = models.BooleanField(default=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.DONE)
    counts = models.JSONField(default=dict, blank=True)
    salt = models.CharField(max_length=32, editable=False)
    fingerprints = models.JSONField(default=list, blank=True, editable=False)
    message_keys = models.JSONField(default=list, blank=True, editable=False)  # keyed digests
    files = models.JSONField(default=list, blank=True, editable=False)  # [{"name", "sha256"}]
    # Working memory a later revision built on: [{"scope", "key", "from_version"}].
    held = models.JSONField(default=list, blank=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,  # see USER_LINK in memproc.models
        db_constraint=False,
        related_name="memproc_forget_receipts",
    )
    created_at = models.DateTimeField(default=timezone.now)
    verified_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        what = self.thread_id if self.scope == self.Scope.THREAD else self.get_scope_display()
        return f"forget {what} of {self.resource_id} ({self.get_status_display()})"
