"""The URLconf of bench/run.py --phase http: memproc's API where the demo mounts it."""

from django.urls import include, path

urlpatterns = [path("api/memproc/", include("memproc.urls"))]
