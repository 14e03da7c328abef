"""The Celery app of the integration test's worker: `celery -A tests.background.celery_app worker`.

Configured like a site's (`project/celery.py`): settings from Django's `CELERY_*`, tasks found by
autodiscovery of `tasks.py` in installed apps, which is how the worker learns `memproc.tasks`.
"""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.background.worker_settings")

app = Celery("memproc-tests")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
