"""The demo site's Celery app: `celery -A project worker -l info` (with MEMPROC_BACKGROUND=celery)."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

app = Celery("project")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
