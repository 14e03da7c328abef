"""The history of working memory: one revision per change."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from memproc.models.threads import THREAD_KEY_MAX_LENGTH, public_thread_id


class WorkingMemoryRevision(models.Model):
    class Scope(models.TextChoices):
        THREAD = "thread", _("Thread")
        RESOURCE = "resource", _("Resource")

    class Source(models.TextChoices):
        MODEL = "model", _("Model tool")
        API = "api", _("API")
        ADMIN = "admin", _("Admin")
        CODE = "code", _("Code")
        USER = "user", _("User (memory view)")
        FORGET = "forget", _("Forget")

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    scope = models.CharField(max_length=16, choices=Scope.choices)
    key = models.CharField(
        max_length=THREAD_KEY_MAX_LENGTH,
        help_text=_("The thread's key (see `thread_key`) or the resource id."),
    )
    old = models.TextField(blank=True, default="")
    new = models.TextField(blank=True, default="")
    version = models.PositiveIntegerField()
    source = models.CharField(max_length=16, choices=Source.choices)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,  # see USER_LINK in memproc.models
        db_constraint=False,
        related_name="memproc_working_memory_revisions",
    )
    thread_id = models.CharField(max_length=THREAD_KEY_MAX_LENGTH, blank=True, default="")  # a key
    # Lineage: the turn that made the change and the keys of the messages it saved, so forgetting a
    # message can take back what the model wrote from it (memproc.services.forget). Empty for
    # changes made outside a turn, and for revisions written before lineage was recorded.
    turn_id = models.UUIDField(null=True, blank=True, editable=False)
    message_ids = models.JSONField(default=list, blank=True, editable=False)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["scope", "key", "-created_at"], name="memproc_wmrev_key")]

    def __str__(self) -> str:
        key = public_thread_id(self.key) if self.scope == self.Scope.THREAD else self.key
        return f"{self.scope} {key} v{self.version}"
