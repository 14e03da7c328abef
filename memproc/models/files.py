"""Attachments: files of messages, kept in the attachment storage."""

from __future__ import annotations

import uuid

from django.db import models
from django.db.models import Q
from django.utils import timezone
from django.utils.text import get_valid_filename

from memproc.models.threads import Message
from memproc.storage import attachment_storage


def attachment_upload_to(instance: Attachment, filename: str) -> str:
    """Content-addressed path; the resource id is a client-chosen string, so it is made path-safe."""
    resource = get_valid_filename(instance.resource_id or "_").replace("..", "_") or "_"
    return f"memproc/{resource}/{instance.sha256[:2]}/{instance.sha256}/{get_valid_filename(filename)}"


class Attachment(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    resource_id = models.CharField(max_length=255)
    message = models.ForeignKey(
        Message, null=True, blank=True, on_delete=models.SET_NULL, related_name="attachments"
    )
    file = models.FileField(upload_to=attachment_upload_to, storage=attachment_storage, max_length=500)
    name = models.CharField(max_length=255)
    content_type = models.CharField(max_length=255)
    size = models.PositiveBigIntegerField()
    sha256 = models.CharField(max_length=64)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["resource_id", "sha256"], name="memproc_attachment_res_sha", condition=~Q(sha256="")
            ),
        ]

    def __str__(self) -> str:
        return self.name
