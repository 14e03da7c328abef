"""memproc's HTTP API: `path("api/memproc/", include("memproc.urls"))`."""

from memproc.api.urls import urlpatterns

app_name = "memproc"

__all__ = ["app_name", "urlpatterns"]
