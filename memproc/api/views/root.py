"""The API's entry points; open to anyone, like a home page."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers, views
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.reverse import reverse

from memproc.api.views.base import MemprocViewMixin

ENTRY_POINTS = {
    "agents": "memproc:agent-list",
    "threads": "memproc:thread-list",
    "tripwires": "memproc:tripwire-list",
    "schema": "memproc:schema",
    "docs": "memproc:docs",
}


class ApiRoot(MemprocViewMixin, views.APIView):
    """Links to the lists, the OpenAPI schema and its Swagger UI."""

    permission_classes = [AllowAny]

    @extend_schema(
        tags=["root"],
        summary="The API's entry points",
        responses={
            200: inline_serializer("ApiRoot", {name: serializers.URLField() for name in ENTRY_POINTS})
        },
    )
    def get(self, request: Request, format: str | None = None) -> Response:
        return Response(
            {name: reverse(url, request=request, format=format) for name, url in ENTRY_POINTS.items()}
        )
