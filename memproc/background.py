"""Background work after commit: inline in-process (default) or as Celery tasks. Only services call it.

Inline mode runs a task's plain function from the registry below; `memproc.tasks` (an interface, a
layer above this module) registers its functions with `register_task` when the app is ready.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from django.db import transaction

from memproc.conf import settings

logger = logging.getLogger(__name__)

# Wire name -> the plain function inline mode runs with the task's keyword arguments.
TASKS: dict[str, Callable[..., Any]] = {}


def register_task(task_name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    """Makes `function` the body inline mode runs for `task_name` (replacing any earlier one)."""
    TASKS[task_name] = function
    return function


def enqueue(task_name: str, *, kwargs: dict[str, Any], inline: Callable[[], Any] | None = None) -> None:
    """Schedules `task_name` to run once the current transaction commits (at once outside one).

    With BACKGROUND="celery" the task is sent by its wire name with `kwargs` (ids and small scalars).
    Inline, `inline` runs in-process (it may hold objects the task would look up again); failures are
    logged and never reach the caller, as they would not from a worker.
    """
    mode = settings.BACKGROUND

    def run() -> None:
        if mode == "celery":
            from celery import current_app

            current_app.send_task(task_name, kwargs=kwargs)
            return
        try:
            if inline is not None:
                inline()
            else:
                run_task_inline(task_name, kwargs)
        except Exception:
            logger.exception("memproc: background task %s failed", task_name)

    transaction.on_commit(run)


def run_task_inline(task_name: str, kwargs: dict[str, Any]) -> Any:
    """Runs the registered body of `task_name` in this process; LookupError if none is registered."""
    try:
        function = TASKS[task_name]
    except KeyError:
        raise LookupError(
            f"No background task {task_name!r} is registered in this process; memproc.tasks registers "
            "its tasks when the app is ready (is 'memproc' in INSTALLED_APPS?)"
        ) from None
    return function(**kwargs)
