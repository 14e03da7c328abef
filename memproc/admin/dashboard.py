"""The numbers an operator looks at first, shown on memproc's app index and list pages."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

from django.utils import timezone

from memproc import models
from memproc.admin import charts
from memproc.selectors.stats import (
    tripwires_pending_count,
    tripwires_per_day,
    turn_durations_by_agent,
    turn_stats_by_agent,
    turns_per_day,
)

# p50/p95 are computed in Python over the durations of today's newest turns, at most this many.
TURN_DURATION_SAMPLE = 10_000
TREND_DAYS = 30


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
        "pending_tripwires": tripwires_pending_count(),
    }


def percentile(values: Sequence[float], q: float) -> float | None:
    """The `q` quantile (0..1) of `values`, interpolated between the nearest ranks; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def turn_stats(*, sample: int = TURN_DURATION_SAMPLE) -> dict[str, Any]:
    """Today's turns per agent: count, blocked and failed rates, p50/p95 duration, tokens. Two queries:
    one grouped aggregate, one over the newest `sample` durations (the percentiles' input)."""
    today = start_of_today()
    tomorrow = today + timedelta(days=1)
    rows = turn_stats_by_agent(since=today)
    durations = turn_durations_by_agent(since=today, limit=sample) if rows else {}
    today_query = {"started_at__gte": str(today), "started_at__lt": str(tomorrow)}
    agents = []
    for row in rows:
        turns, agent_id = row["turns"], row["agent_id"]
        query = {"agent_id__exact": agent_id, **today_query}
        agents.append(
            {
                "agent_id": agent_id,
                "turns": turns,
                "blocked": row["blocked"],
                "blocked_rate": row["blocked"] / turns * 100 if turns else 0.0,
                "failed": row["failed"],
                "failed_rate": row["failed"] / turns * 100 if turns else 0.0,
                "p50": percentile(durations.get(agent_id, ()), 0.5),
                "p95": percentile(durations.get(agent_id, ()), 0.95),
                "tokens": round(row["tokens"] or 0),
                "query": urlencode(query),
                "blocked_query": urlencode({**query, "status__exact": models.TurnRecord.Status.BLOCKED}),
                "failed_query": urlencode({**query, "status__exact": models.TurnRecord.Status.FAILED}),
            }
        )
    total = sum(a["turns"] for a in agents)
    return {
        "agents": agents,
        "turns": total,
        "sampled": total > sample,
        "sample": sample,
        "today_query": urlencode(today_query),
    }


def trends(*, turns: bool, tripwires: bool, days: int = TREND_DAYS) -> dict[str, Any]:
    """Per day over the last `days` days, as charts: turns stacked by how they ended and their p95
    duration (when `turns`), tripwire logs (when `tripwires`). Three queries at most."""
    result: dict[str, Any] = {"days": days}
    if turns:
        per_day = turns_per_day(days=days)
        dates = [d.day for d in per_day]
        stacks = [[("completed", d.completed), ("blocked", d.blocked), ("failed", d.failed)] for d in per_day]
        result["turns"] = charts.stacked_bars(days=dates, stacks=stacks, data=per_day)
        result["turn_totals"] = {
            "turns": sum(d.turns for d in per_day),
            "blocked": sum(d.blocked for d in per_day),
            "failed": sum(d.failed for d in per_day),
        }
        result["latency"] = charts.line(days=dates, values=[d.p95_ms for d in per_day], data=per_day)
    if tripwires:
        logs = tripwires_per_day(days=days)
        result["tripwires"] = charts.stacked_bars(
            days=[d.day for d in logs], stacks=[[("tripwires", d.tripwires)] for d in logs], data=logs
        )
        result["tripwire_total"] = sum(d.tripwires for d in logs)
    return result
