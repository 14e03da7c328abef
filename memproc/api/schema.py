"""The OpenAPI document of memproc's own endpoints and its Swagger UI, wherever the project mounts them.

Neither needs a project setting: the document is generated with drf-spectacular's `AutoSchema` even
when `REST_FRAMEWORK["DEFAULT_SCHEMA_CLASS"]` is DRF's own, and the docs page serves Swagger UI from
the drf-spectacular-sidecar package through memproc's own URLs (no CDN, no `INSTALLED_APPS` entry,
no `collectstatic`), with its start-up script in a file of its own, so a strict Content-Security-Policy
(`script-src 'self'`) allows it.
"""

from __future__ import annotations

import functools
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import drf_spectacular_sidecar
from django.http import FileResponse, Http404, HttpRequest
from django.urls import reverse
from django.utils.cache import patch_cache_control
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import extend_schema
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.permissions import AllowAny
from rest_framework.schemas.inspectors import ViewInspector
from rest_framework.settings import api_settings

from memproc import __version__

SCHEMA_SETTINGS = {
    "TITLE": "memproc API",
    "VERSION": __version__,
    "DESCRIPTION": "LLM agents with memory: agents, threads, messages, working memory, tripwires, "
    "attachments.",
    "PREPROCESSING_HOOKS": ["memproc.api.schema.memproc_endpoints"],
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "memproc.api.schema.required_choice_bodies",
    ],
    # Two models have a `status` enum: name both rather than let drf-spectacular guess.
    "ENUM_NAME_OVERRIDES": {
        "TripwireStatusEnum": "memproc.models.TripwireLog.Status",
        "TurnStatusEnum": "memproc.models.TurnRecord.Status",
    },
}

# The files of drf-spectacular-sidecar's Swagger UI that the docs page loads, with their content types;
# nothing else is served.
SWAGGER_UI_FILES = {
    "swagger-ui.css": "text/css",
    "swagger-ui-bundle.js": "text/javascript",
    "swagger-ui-standalone-preset.js": "text/javascript",
    "favicon-32x32.png": "image/png",
}


def memproc_endpoints(endpoints: list[tuple[Any, ...]], **kwargs: Any) -> list[tuple[Any, ...]]:
    """Keeps memproc's views only, so the project's other DRF views stay out of this document."""
    return [e for e in endpoints if _view_module(e[3]).startswith("memproc.")]


def required_choice_bodies(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """A body given as a raw schema that must be one of several shapes (`oneOf`, e.g. forget's
    `message_ids` or `thread_id`) is required: drf-spectacular marks a raw schema optional."""
    for operations in result.get("paths", {}).values():
        for operation in operations.values():
            body = operation.get("requestBody") if isinstance(operation, dict) else None
            if body and any("oneOf" in media.get("schema", {}) for media in body.get("content", {}).values()):
                body["required"] = True
    return result


def _view_module(callback: Any) -> str:
    view_class = getattr(callback, "cls", None)
    return getattr(view_class, "__module__", "") if view_class is not None else ""


class MemprocSchemaGenerator(SchemaGenerator):
    """drf-spectacular's generator, for projects whose `DEFAULT_SCHEMA_CLASS` is DRF's own.

    `@extend_schema` builds its schema classes on `DEFAULT_SCHEMA_CLASS` when memproc's views are
    imported; with DRF's default that is `rest_framework.schemas.openapi.AutoSchema`, which
    drf-spectacular cannot use (a 500). Each view's schema is then moved onto drf-spectacular's
    `AutoSchema`, keeping every `@extend_schema` override, so the document is the same as with the
    setting. A project that sets it (or a subclass) is left alone.
    """

    def create_view(self, callback: Any, method: str, request: Any = None) -> Any:
        view = super().create_view(callback, method, request)
        schema = view.schema
        if not isinstance(schema, AutoSchema):
            spectacular_class = _on_spectacular(schema.__class__, api_settings.DEFAULT_SCHEMA_CLASS)
            if spectacular_class is not None:
                self._set_schema_to_view(view, spectacular_class())
        return view


@functools.cache  # one class per pair: building a class per request would make schemas unequal
def _on_spectacular(schema_class: type, default_class: type) -> type[AutoSchema] | None:
    """`schema_class` (the default schema, or `@extend_schema` classes built on it) on `AutoSchema`.

    The `@extend_schema` classes call `super()`, so they must stay in the new class's MRO, and with
    them the default class they derive from; a base that puts `AutoSchema` before the default class
    makes every call they pass on reach drf-spectacular first.
    """
    if not isinstance(default_class, type) or not issubclass(schema_class, default_class):
        return None
    if schema_class is default_class:
        return AutoSchema
    base = type(
        "SpectacularFirst",
        (AutoSchema, default_class),
        # drf-spectacular's AutoSchema has no __init__ of its own: skip the default class's.
        {"__init__": ViewInspector.__init__, "__module__": __name__},
    )
    return type(schema_class.__name__, (schema_class, base), {"__module__": __name__})


@extend_schema(exclude=True)
class SchemaView(SpectacularAPIView):
    """OpenAPI 3 (YAML, or JSON with `?format=json`)."""

    permission_classes = [AllowAny]
    custom_settings = SCHEMA_SETTINGS
    generator_class = MemprocSchemaGenerator


@extend_schema(exclude=True)
class DocsView(SpectacularSwaggerSplitView):
    """Swagger UI over `schema/`; its files and its start-up script come from memproc's own URLs."""

    permission_classes = [AllowAny]
    url_name = "memproc:schema"
    title = "memproc API"
    template_name = "memproc/api/swagger_ui.html"

    def _swagger_ui_resource(self, filename: str) -> str:
        return _asset_url(self.request, filename)

    def _swagger_ui_favicon(self) -> str:
        return _asset_url(self.request, "favicon-32x32.png")


def _asset_url(request: HttpRequest, filename: str) -> str:
    namespace = getattr(request.resolver_match, "namespace", "") or "memproc"
    # The sidecar's version in the URL, so a cached file is never stale after an upgrade.
    return f"{reverse(f'{namespace}:docs-asset', args=[filename])}?v={_sidecar_version()}"


def docs_asset(request: HttpRequest, filename: str) -> FileResponse:
    """One file of Swagger UI from the drf-spectacular-sidecar package, cacheable for a day."""
    if filename not in SWAGGER_UI_FILES:
        raise Http404("No such Swagger UI file.")
    path = _sidecar_dir() / filename
    response = FileResponse(path.open("rb"), content_type=SWAGGER_UI_FILES[filename])
    patch_cache_control(response, public=True, max_age=86400)
    return response


def _sidecar_dir() -> Path:
    return (
        Path(drf_spectacular_sidecar.__file__).parent
        / "static"
        / "drf_spectacular_sidecar"
        / "swagger-ui-dist"
    )


@functools.cache  # the installed package's version, read once: not a cache of data
def _sidecar_version() -> str:
    try:
        return version("drf-spectacular-sidecar")
    except PackageNotFoundError:  # pragma: no cover - a vendored copy without metadata
        return "0"
