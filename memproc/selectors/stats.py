"""Figures for the admin's dashboard and lists: counts and aggregates over many rows."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.models import Count, Max, Q, QuerySet, Sum

from memproc import models
from memproc.selectors.turns import turn_tokens


def threads_with_stats() -> QuerySet[models.Thread]:
    return models.Thread.objects.select_related("resource").annotate(
        message_count=Count("messages", distinct=True), last_message_at=Max("messages__created_at")
    )


def tripwires_pending_count() -> int:
    return models.TripwireLog.objects.filter(status=models.TripwireLog.Status.PENDING).count()


def turn_stats_by_agent(*, since: datetime) -> list[dict[str, Any]]:
    """Per agent, turns since `since`: `turns`, `blocked`, `failed`, `tokens`. One grouped query
    (the `memproc_turn_started` index)."""
    Status = models.TurnRecord.Status
    return list(
        models.TurnRecord.objects.filter(started_at__gte=since)
        .order_by()
        .values("agent_id")
        .annotate(
            turns=Count("pk"),
            blocked=Count("pk", filter=Q(status=Status.BLOCKED)),
            failed=Count("pk", filter=Q(status=Status.FAILED)),
            tokens=Sum(turn_tokens()),
        )
        .order_by("-turns", "agent_id")
    )


def turn_durations_by_agent(*, since: datetime, limit: int) -> dict[str, list[float]]:
    """Per agent, the durations (ms) of the newest `limit` turns since `since`. One query."""
    rows = (
        models.TurnRecord.objects.filter(started_at__gte=since)
        .order_by("-started_at")
        .values_list("agent_id", "duration_ms")[:limit]
    )
    durations: dict[str, list[float]] = {}
    for agent_id, ms in rows:
        durations.setdefault(agent_id, []).append(ms)
    return durations
