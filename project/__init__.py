"""The memproc demo site."""

try:  # Celery is an optional extra; the demo runs without it.
    from project.celery import app as celery_app
except ImportError:  # pragma: no cover
    celery_app = None

__all__ = ["celery_app"]
