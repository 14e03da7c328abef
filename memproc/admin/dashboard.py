"""The numbers an operator looks at first, shown on memproc's app index and list pages."""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

from django.utils import timezone

from memproc import models, selectors


def start_of_today() -> Any:
    return timezone.localtime().replace(hour=0, minute=0, second=0, microsecond=0)


def operator_counts() -> dict[str, Any]:
    """Two COUNT queries (pending tripwires use the status index; Thread.created_at has none yet).

    `threads_today_query` is the thread list's own "created today" filter, so the count links to
    exactly the threads it counts.
    """
    today = start_of_today()
    tomorrow = today + timedelta(days=1)
    return {
        "threads_today": models.Thread.objects.filter(created_at__gte=today, created_at__lt=tomorrow).count(),
        "threads_today_query": urlencode({"created_at__gte": str(today), "created_at__lt": str(tomorrow)}),
        "pending_tripwires": selectors.tripwires_pending_count(),
    }
