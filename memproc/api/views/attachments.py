"""Attachment metadata and a download URL, for the owning resource or staff with `memproc.view_thread`."""

from __future__ import annotations

from django.db.models import QuerySet
from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import mixins, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request

from memproc import models
from memproc.api.serializers.attachments import AttachmentSerializer
from memproc.api.views.base import MemprocViewMixin, errors, id_parameter
from memproc.services.attachments import attachment_download_response


@extend_schema(tags=["attachments"])
@extend_schema_view(
    retrieve=extend_schema(
        summary="An attachment's metadata and download URL",
        description=(
            "`url` downloads the file: on S3 a signed URL that expires, else this attachment's "
            "`download/` URL. Either way the file comes as a download (`Content-Disposition: "
            "attachment`, `X-Content-Type-Options: nosniff`), never as a page of the site."
        ),
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

    @extend_schema(
        summary="The file, as a download",
        description=(
            "Served with `Content-Disposition: attachment`, `X-Content-Type-Options: nosniff` and a "
            "sandboxing Content-Security-Policy; its type is the stored one when that is a safe type "
            "to show (images, PDF, plain text, CSV, Markdown, JSON), else `application/octet-stream`."
        ),
        parameters=[id_parameter("The attachment id (a UUID).")],
        responses={
            (200, "application/octet-stream"): OpenApiResponse(OpenApiTypes.BINARY),
            **errors(404, 503),
        },
    )
    @action(detail=True, methods=["get"])
    def download(self, request: Request, id: str) -> HttpResponse:
        return attachment_download_response(self.get_object())
