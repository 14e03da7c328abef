"""Send again the background jobs that could not be sent when their work committed.

`python manage.py memproc_outbox` delivers every due job (run it every minute from cron, or schedule
the `memproc.outbox_dispatch` task with Celery beat); `--list` only shows what is waiting;
`--retry-parked` also delivers the jobs that failed too often and were parked for an operator.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand
from django.db.models import Count, Max, Min

from memproc.background import MAX_ATTEMPTS, outbox_dispatch
from memproc.models import OutboxJob


class Command(BaseCommand):
    help = "Deliver background jobs left in memproc's outbox (for example while the broker was down)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--list", action="store_true", help="only show what is waiting")
        parser.add_argument(
            "--retry-parked",
            action="store_true",
            help=f"also deliver jobs parked after {MAX_ATTEMPTS} failed attempts",
        )
        parser.add_argument("--limit", type=int, default=500, help="at most this many jobs (default 500)")

    def handle(self, *args: Any, **options: Any) -> None:
        self.show_waiting()
        if options["list"]:
            return
        counts = outbox_dispatch(limit=options["limit"], include_parked=options["retry_parked"])
        self.stdout.write(
            f"Delivered {counts['delivered']}, failed {counts['failed']}, "
            f"skipped {counts['skipped']} (taken by another dispatcher)."
        )

    def show_waiting(self) -> None:
        rows = (
            OutboxJob.objects.values("task")
            .annotate(jobs=Count("id"), oldest=Min("created_at"), attempts=Max("attempts"))
            .order_by("task")
        )
        if not rows:
            self.stdout.write("The outbox is empty.")
            return
        for row in rows:
            parked = OutboxJob.objects.filter(task=row["task"], attempts__gte=MAX_ATTEMPTS).count()
            self.stdout.write(
                f"{row['task']}: {row['jobs']} waiting since {row['oldest']:%Y-%m-%d %H:%M:%S} "
                f"(most attempts {row['attempts']}, parked {parked})"
            )
