"""A resource's export: everything stored for it, as one streamed JSON document."""

from __future__ import annotations

from django.http import StreamingHttpResponse
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import views
from rest_framework.exceptions import NotFound
from rest_framework.request import Request

from memproc import models
from memproc.api.permissions import TRIPWIRE_READ, has_any_perm
from memproc.api.serializers.export import EXPORT_DOCUMENT_SCHEMA
from memproc.api.views.base import MemprocViewMixin, errors, id_parameter
from memproc.services.export import resource_export_chunks
from memproc.services.export.document import storage_url


class ResourceExportView(MemprocViewMixin, views.APIView):
    """GET: the owner, or staff with `memproc.view_thread`; anyone else, and a resource with nothing
    stored, get a 404. The document streams as it is read, so a large resource never sits in memory.
    Tripwire logs and the usernames of who edited working memory are operators' records: only
    callers who may read the review queue (`memproc.view_tripwirelog`) get them."""

    @extend_schema(
        tags=["export"],
        summary="Export everything stored for a resource",
        description=(
            "Threads with their messages, working memory and its revisions, turn records, tripwire logs, "
            "attachments (metadata and a download URL). Embeddings are not included. `manage.py "
            "memproc_import` reads the document back; `memproc_export --with-files` also packs the files."
        ),
        parameters=[id_parameter("The resource id.")],
        responses={200: OpenApiResponse(EXPORT_DOCUMENT_SCHEMA), **errors(404)},
    )
    def get(self, request: Request, id: str) -> StreamingHttpResponse:
        self.require_resource(id)

        def url_for(attachment: models.Attachment) -> str | None:
            url = storage_url(attachment)
            return request.build_absolute_uri(url) if url and url.startswith("/") else url

        # Tripwire logs are the review queue's and name reviewers: only its readers get them.
        user = request.user
        operator = bool(user.is_active and user.is_staff and has_any_perm(user, TRIPWIRE_READ))
        try:
            pieces = resource_export_chunks(resource_id=id, url_for=url_for, operator_data=operator)
        except LookupError as exc:
            raise NotFound() from exc
        response = StreamingHttpResponse(pieces, content_type="application/json")
        response["Content-Disposition"] = 'attachment; filename="memproc-export.json"'
        return response
