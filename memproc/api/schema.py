"""The OpenAPI document of memproc's own endpoints, wherever the project mounts them."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.permissions import AllowAny

SCHEMA_SETTINGS = {
    "TITLE": "memproc API",
    "DESCRIPTION": "LLM agents with memory: agents, threads, messages, working memory, tripwires, "
    "attachments.",
    "PREPROCESSING_HOOKS": ["memproc.api.schema.memproc_endpoints"],
    # Two models have a `status` enum: name both rather than let drf-spectacular guess.
    "ENUM_NAME_OVERRIDES": {
        "TripwireStatusEnum": "memproc.models.TripwireLog.Status",
        "TurnStatusEnum": "memproc.models.TurnRecord.Status",
    },
}


def memproc_endpoints(endpoints: list[tuple[Any, ...]], **kwargs: Any) -> list[tuple[Any, ...]]:
    """Keeps memproc's views only, so the project's other DRF views stay out of this document."""
    return [e for e in endpoints if _view_module(e[3]).startswith("memproc.")]


def _view_module(callback: Any) -> str:
    view_class = getattr(callback, "cls", None)
    return getattr(view_class, "__module__", "") if view_class is not None else ""


@extend_schema(exclude=True)
class SchemaView(SpectacularAPIView):
    """OpenAPI 3 (YAML, or JSON with `?format=json`)."""

    permission_classes = [AllowAny]
    custom_settings = SCHEMA_SETTINGS


@extend_schema(exclude=True)
class DocsView(SpectacularSwaggerView):
    """Swagger UI over `schema/`."""

    permission_classes = [AllowAny]
    url_name = "memproc:schema"
