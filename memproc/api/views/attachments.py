"""Attachment metadata and a download URL, for the owning resource or staff with `memproc.view_thread`."""

from __future__ import annotations

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins, viewsets

from memproc import models
from memproc.api.serializers import AttachmentSerializer
from memproc.api.views.base import MemprocViewMixin, errors, id_parameter


@extend_schema(tags=["attachments"])
@extend_schema_view(
    retrieve=extend_schema(
        summary="An attachment's metadata and download URL",
        description="`url` is the storage's URL: on S3 a signed URL that expires.",
        parameters=[id_parameter("The attachment id (a UUID).")],
        responses={200: AttachmentSerializer, **errors(404, 503)},
    ),
)
class AttachmentViewSet(MemprocViewMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    serializer_class = AttachmentSerializer

    def get_queryset(self) -> QuerySet[models.Attachment]:
        qs = models.Attachment.objects.select_related("message")
        allowed = self.allowed_resources()
        return qs if allowed is None else qs.filter(resource_id__in=allowed)
