"""memproc's API, mounted where the demo mounts it, and the benchmark's baseline stream."""

from django.urls import include, path

from bench.concurrency_site.views import baseline_stream

urlpatterns = [
    path("api/memproc/", include("memproc.urls")),
    path("baseline/stream/", baseline_stream),
]
