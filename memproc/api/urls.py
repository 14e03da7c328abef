"""memproc's routes (namespace "memproc"), mounted by the project, e.g. under `api/memproc/`."""

from __future__ import annotations

from django.urls import path
from rest_framework.routers import SimpleRouter

from memproc.api.schema import DocsView, SchemaView
from memproc.api.views import (
    AgentViewSet,
    ApiRoot,
    AttachmentViewSet,
    ResourceWorkingMemoryView,
    ThreadViewSet,
    TripwireViewSet,
)

router = SimpleRouter()
router.register("agents", AgentViewSet, basename="agent")
router.register("threads", ThreadViewSet, basename="thread")
router.register("tripwires", TripwireViewSet, basename="tripwire")
router.register("attachments", AttachmentViewSet, basename="attachment")

urlpatterns = [
    path("", ApiRoot.as_view(), name="api-root"),
    path(
        "resources/<str:id>/working-memory/",
        ResourceWorkingMemoryView.as_view(),
        name="resource-working-memory",
    ),
    path("schema/", SchemaView.as_view(), name="schema"),
    path("docs/", DocsView.as_view(), name="docs"),
    *router.urls,
]
