"""memproc's HTTP API: `path("api/memproc/", include("memproc.urls"))`."""

from django.urls import path

from memproc.api.urls import urlpatterns as api_urlpatterns
from memproc.api.views.archive import ThreadArchiveView, ThreadUnarchiveView
from memproc.api.views.branching import ThreadBranchView
from memproc.api.views.export import ResourceExportView

app_name = "memproc"

urlpatterns = [
    path("threads/<str:id>/branch/", ThreadBranchView.as_view(), name="thread-branch"),
    path("threads/<str:id>/archive/", ThreadArchiveView.as_view(), name="thread-archive"),
    path("threads/<str:id>/unarchive/", ThreadUnarchiveView.as_view(), name="thread-unarchive"),
    path("resources/<str:id>/export/", ResourceExportView.as_view(), name="resource-export"),
    *api_urlpatterns,
]

__all__ = ["app_name", "urlpatterns"]
