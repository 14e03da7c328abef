"""Background work after commit, through an outbox: inline in-process (default) or as Celery tasks.

Only services call `enqueue`. With BACKGROUND="celery" a job is first written as an `OutboxJob` row in
the caller's transaction, sent after commit and deleted once the broker took it; a broker that is
down leaves the row (the committed work and its caller are unaffected) and `outbox_dispatch` (the
`memproc_outbox` command, the `memproc.outbox_dispatch` beat task) sends it again later. Inline, the
job runs in-process after commit and a row is written only when it fails, so the happy path costs no
query; the failed job is run again later with backoff, by the same dispatcher or by the next inline
job of this process that succeeds. Every task is idempotent, so a job delivered twice does no harm.

Inline mode runs a task's plain function from the registry below; `memproc.tasks` (an interface, a
layer above this module) registers its functions with `register_task` when the app is ready.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as SendTimeout
from datetime import datetime, timedelta
from typing import Any

from django.db import DatabaseError, transaction
from django.utils import timezone

from memproc import logs, redaction
from memproc.conf import settings
from memproc.db import memproc_db

logger = logging.getLogger(__name__)

# Wire name -> the plain function inline mode runs with the task's keyword arguments.
TASKS: dict[str, Callable[..., Any]] = {}

# A job written at enqueue time belongs to its after-commit send for this long; only then may the
# dispatcher take it, so a healthy send and a concurrent sweep do not both deliver it.
# An outbox row for good: (id, created_at); see `job_ref`.
JobRef = tuple[int, datetime]

SEND_LEASE = timedelta(seconds=60)
# While a dispatcher delivers a job it holds it for this long (a crashed dispatcher releases it).
DISPATCH_LEASE = timedelta(seconds=300)
# After this many failed deliveries a job is parked for an operator (`memproc_outbox --retry-parked`).
MAX_ATTEMPTS = 12
BACKOFF_CAP_SECONDS = 3600

_inline_failures = threading.Event()  # set when this process parked an inline job: sweep on success

# Sends after commit run on these threads, so that a broker which accepts connections and never
# answers costs a caller at most BROKER_SEND_TIMEOUT. Celery's transports have no read timeout by
# default, so such a send may never return: at most SENDERS of them are in flight per process, and
# while all are stuck a job is left in the outbox at once (the dispatcher sends it later).
SENDERS = 4
_senders = threading.BoundedSemaphore(SENDERS)
_sender_pool = ThreadPoolExecutor(max_workers=SENDERS, thread_name_prefix="memproc-send")


def register_task(task_name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    """Makes `function` the body inline mode runs for `task_name` (replacing any earlier one)."""
    TASKS[task_name] = function
    return function


def enqueue(task_name: str, *, kwargs: dict[str, Any], inline: Callable[[], Any] | None = None) -> None:
    """Schedules `task_name` to run once the current transaction commits (at once outside one).

    With BACKGROUND="celery" the task is sent by its wire name with `kwargs` (ids and small scalars),
    through the outbox. Inline, `inline` runs in-process (it may hold objects the task would look up
    again); a failure is logged, never reaches the caller, and is retried later from `kwargs`.
    """
    if settings.BACKGROUND == "celery":
        from memproc.models import OutboxJob

        job = OutboxJob.objects.create(
            task=task_name, kwargs=kwargs, next_attempt_at=timezone.now() + SEND_LEASE
        )
        ref = job_ref(job)
        transaction.on_commit(lambda: _send_after_commit(ref, task_name, kwargs), using=memproc_db())
        return
    transaction.on_commit(lambda: _run_inline_after_commit(task_name, kwargs, inline), using=memproc_db())


def park(task_name: str, *, kwargs: dict[str, Any], exc: Exception) -> None:
    """An inline job that failed before it could run after commit (a turn's embedding, computed before
    its save): logged and written to the outbox in the caller's transaction, as a failed inline job
    after commit is, so it is retried later with backoff. Raises what the write raises: the caller's
    transaction holds it."""
    from memproc.models import OutboxJob

    logs.failure(logger, "memproc: background task %s failed; it is retried later", task_name, exc=exc)
    OutboxJob.objects.create(
        task=task_name,
        kwargs=kwargs,
        attempts=1,
        next_attempt_at=timezone.now() + _backoff(1),
        last_error=_describe(exc),
    )
    transaction.on_commit(_inline_failures.set, using=memproc_db())


def job_ref(job: Any) -> JobRef:
    """What names one outbox row for good: its id and creation time. SQLite gives the id of a deleted
    row to the next one, so a send that returns late (stuck on a broker while a dispatcher delivered
    and deleted its job) must not delete or reschedule a newer job by id alone."""
    return (job.pk, job.created_at)


def _send_after_commit(job_id: JobRef, task_name: str, kwargs: dict[str, Any]) -> None:
    try:
        celery_send_bounded(task_name, kwargs)
    except BrokerUnanswered as exc:
        # Its row is due after SEND_LEASE; a send that still gets through is absorbed by the
        # idempotent task.
        logger.warning(
            "memproc: background task %s waits in the outbox (%s); it is sent by `manage.py "
            "memproc_outbox` or the memproc.outbox_dispatch task",
            task_name,
            exc,
        )
        return
    except Exception as exc:
        logger.warning(
            "memproc: could not send background task %s (%s); it stays in the outbox and is sent "
            "again by `manage.py memproc_outbox` or the memproc.outbox_dispatch task",
            task_name,
            _describe(exc),
        )
        _record_failure(job_id, exc, attempts=1)
        return
    _forget(job_id)


class BrokerUnanswered(Exception):
    """The broker took no answer back in time, or earlier sends are still stuck on it."""


def celery_send_bounded(task_name: str, kwargs: dict[str, Any]) -> None:
    """`celery_send`, waiting at most BROKER_SEND_TIMEOUT; BrokerUnanswered past it."""
    from celery import current_app

    app = current_app._get_current_object()  # Celery's current app is per thread: the caller's
    if not _senders.acquire(blocking=False):
        raise BrokerUnanswered(f"the broker has not answered the last {SENDERS} sends")
    try:
        sent = _sender_pool.submit(_send_then_free_sender, app, task_name, kwargs)
    except BaseException:
        _senders.release()
        raise
    try:
        sent.result(timeout=float(settings.BROKER_SEND_TIMEOUT))
    except SendTimeout:
        raise BrokerUnanswered(f"no answer within {settings.BROKER_SEND_TIMEOUT} s") from None


def _send_then_free_sender(app: Any, task_name: str, kwargs: dict[str, Any]) -> None:
    try:
        celery_send(task_name, kwargs, app=app)
    finally:
        _senders.release()


def _run_inline_after_commit(
    task_name: str, kwargs: dict[str, Any], inline: Callable[[], Any] | None
) -> None:
    try:
        if inline is not None:
            inline()
        else:
            run_task_inline(task_name, kwargs)
    except Exception as exc:
        logs.failure(logger, "memproc: background task %s failed; it is retried later", task_name, exc=exc)
        _park_inline_failure(task_name, kwargs, exc)
        return
    _sweep_parked()


def inline_succeeded() -> None:
    """An inline job's work succeeded in the caller's transaction (a turn's embedding, written with
    it): once that commits, parked inline jobs are swept, as after a job that succeeds after commit."""
    if _inline_failures.is_set():
        transaction.on_commit(_sweep_parked, using=memproc_db())


def _sweep_parked() -> None:
    if _inline_failures.is_set():
        _inline_failures.clear()
        outbox_dispatch(limit=100)


def _park_inline_failure(task_name: str, kwargs: dict[str, Any], exc: BaseException) -> None:
    """Writes a failed inline job to the outbox so it is retried (if its arguments can be stored)."""
    from memproc.models import OutboxJob

    if not _is_json(kwargs):
        logger.error("memproc: background task %s cannot be retried: its arguments are not JSON", task_name)
        return
    try:
        OutboxJob.objects.create(
            task=task_name,
            kwargs=kwargs,
            attempts=1,
            next_attempt_at=timezone.now() + _backoff(1),
            last_error=_describe(exc),
        )
    except DatabaseError as exc:
        logs.failure(logger, "memproc: could not record the failed background task %s", task_name, exc=exc)
        return
    _inline_failures.set()


def outbox_dispatch(*, limit: int = 500, include_parked: bool = False) -> dict[str, int]:
    """Delivers the outbox's due jobs (Celery: sends them; inline: runs them); returns the counts.

    Safe to run from several processes at once: a job is claimed with a conditional UPDATE before it
    is delivered, so each due job is delivered by one of them.
    """
    from memproc.models import OutboxJob

    now = timezone.now()
    due = OutboxJob.objects.filter(next_attempt_at__lte=now).order_by("id")
    if not include_parked:
        due = due.filter(attempts__lt=MAX_ATTEMPTS)
    counts = {"delivered": 0, "failed": 0, "skipped": 0}
    for job in list(due[:limit]):
        claimed = OutboxJob.objects.filter(pk=job.pk, next_attempt_at=job.next_attempt_at).update(
            next_attempt_at=now + DISPATCH_LEASE
        )
        if not claimed:
            counts["skipped"] += 1  # another dispatcher has it
            continue
        try:
            if settings.BACKGROUND == "celery":
                celery_send_bounded(job.task, job.kwargs)
            else:
                run_task_inline(job.task, job.kwargs)
        except Exception as exc:
            logger.warning("memproc: outbox job %s (%s) failed again: %s", job.pk, job.task, _describe(exc))
            _record_failure(job_ref(job), exc, attempts=job.attempts + 1)
            counts["failed"] += 1
            continue
        _forget(job_ref(job))
        counts["delivered"] += 1
    return counts


def celery_send(task_name: str, kwargs: dict[str, Any], *, app: Any = None) -> None:
    if app is None:
        from celery import current_app

        app = current_app
    app.send_task(task_name, kwargs=kwargs)


def _job(ref: JobRef) -> Any:
    from memproc.models import OutboxJob

    return OutboxJob.objects.filter(pk=ref[0], created_at=ref[1])


def _record_failure(job_id: JobRef, exc: BaseException, *, attempts: int) -> None:
    try:
        _job(job_id).update(
            attempts=attempts, next_attempt_at=timezone.now() + _backoff(attempts), last_error=_describe(exc)
        )
    except DatabaseError as exc:
        logs.failure(logger, "memproc: could not record the failure of outbox job %s", job_id[0], exc=exc)


def _forget(job_id: JobRef) -> None:
    try:
        _job(job_id).delete()
    except DatabaseError as exc:  # delivered; a later sweep sends it again, which the idempotent task absorbs
        logs.failure(logger, "memproc: could not remove delivered outbox job %s", job_id[0], exc=exc)


def _backoff(attempts: int) -> timedelta:
    return timedelta(seconds=min(BACKOFF_CAP_SECONDS, 2 ** min(attempts, 20)))


def _describe(exc: BaseException) -> str:
    """The failure as logged and kept in `OutboxJob.last_error`: masked (`memproc.redaction`)."""
    return redaction.describe(exc)[:2000]


def _is_json(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


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
