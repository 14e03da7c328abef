"""Settings of the integration test's Celery worker process: the test settings, with the database,
broker and queue the test process hands over through the environment."""

import json
import os

from tests.settings import *  # noqa: F403
from tests.settings import INSTALLED_APPS, MEMPROC

DATABASES = {"default": json.loads(os.environ["MEMPROC_TEST_DATABASE"])}
INSTALLED_APPS = [*INSTALLED_APPS, "tests.background"]  # its agents.py registers the test agent
MEMPROC = {**MEMPROC, "BACKGROUND": "celery"}

CELERY_BROKER_URL = os.environ["MEMPROC_TEST_BROKER"]
CELERY_TASK_DEFAULT_QUEUE = os.environ["MEMPROC_TEST_QUEUE"]
CELERY_TASK_IGNORE_RESULT = True
CELERY_WORKER_ENABLE_REMOTE_CONTROL = False
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"memproc": {"handlers": ["console"], "level": "INFO"}},
}
