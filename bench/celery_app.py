"""The Celery app of benchmark runs with --background celery: `celery -A bench.celery_app worker`.

Configured like a site's (project/celery.py) so the benchmark measures the same path: settings from
bench.settings' `CELERY_*`, memproc's tasks found by autodiscovery. bench/run.py imports it too, which
makes it the current app that memproc.background sends through.
"""

import os
from typing import Any

from celery import Celery
from celery.signals import worker_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")

app = Celery("bench")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_init.connect
def register_bench_agents(**kwargs: Any) -> None:
    """Registers the W1-W3 agents in the worker, as a site's agents.py would: tasks name the agent, and
    an unknown one falls back to the EMBEDDER setting with a warning per task."""
    import django

    django.setup()  # done already by Celery's Django fix-up; a no-op then
    from bench.run import bench_agent
    from bench.workload import InstantModel
    from memproc.agents import register

    for workload in ("W1", "W2", "W3"):
        register(bench_agent(workload, InstantModel()), replace=True)
