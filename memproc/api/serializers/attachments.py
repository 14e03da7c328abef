"""Attachments as the API renders them, with the URL their file downloads from."""

from __future__ import annotations

from django.urls import reverse
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from memproc import models
from memproc.models import public_thread_id
from memproc.services.attachments import attachment_download_url


class AttachmentSerializer(serializers.ModelSerializer):
    thread_id = serializers.SerializerMethodField()
    url = serializers.SerializerMethodField()

    class Meta:
        model = models.Attachment
        fields = ["id", "name", "content_type", "size", "sha256", "created_at", "thread_id", "url"]
        read_only_fields = fields

    @extend_schema_field({"type": "string", "nullable": True})
    def get_thread_id(self, attachment: models.Attachment) -> str | None:
        return public_thread_id(attachment.message.thread_id) if attachment.message_id else None

    @extend_schema_field({"type": "string", "format": "uri", "nullable": True})
    def get_url(self, attachment: models.Attachment) -> str | None:
        """Where the file downloads from: the storage's signed URL that sends the download headers
        (S3), else memproc's `download/` view (never the storage's plain URL, served inline)."""
        if not attachment.file:
            return None
        url = attachment_download_url(attachment) or reverse(
            "memproc:attachment-download", args=[attachment.pk]
        )
        request = self.context.get("request")
        return request.build_absolute_uri(url) if request is not None and url.startswith("/") else url
