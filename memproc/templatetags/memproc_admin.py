"""Template tags of memproc's admin templates."""

from __future__ import annotations

from datetime import date
from typing import Any

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString

register = template.Library()


@register.inclusion_tag("admin/memproc/includes/operator_counts.html", takes_context=True)
def memproc_operator_counts(context: template.Context) -> dict[str, Any]:
    """Threads created today and tripwires awaiting review, for the user allowed to see them."""
    from memproc.admin.dashboard import operator_counts

    user = getattr(context.get("request"), "user", None)
    if user is None or not user.has_module_perms("memproc"):
        return {"counts": None}
    return {
        "counts": operator_counts(),
        "can_view_tripwires": user.has_perm("memproc.view_tripwirelog")
        or user.has_perm("memproc.change_tripwirelog"),
    }


@register.inclusion_tag("admin/memproc/includes/turn_stats.html", takes_context=True)
def memproc_turn_stats(context: template.Context) -> dict[str, Any]:
    """Today's turns per agent (count, blocked rate, p50/p95 duration, tokens), for users who may
    read turn records."""
    from memproc.admin.dashboard import turn_stats

    user = getattr(context.get("request"), "user", None)
    if user is None or not user.has_perm("memproc.view_turnrecord"):
        return {"stats": None}
    return {"stats": turn_stats()}


@register.inclusion_tag("admin/memproc/includes/trends.html", takes_context=True)
def memproc_trends(context: template.Context) -> dict[str, Any]:
    """The last 30 days per day, as small charts: turns by status and their p95 duration for users who
    may read turn records (as "Turns today"), tripwires for those who may read tripwire logs (as the
    count of tripwires to review)."""
    from memproc.admin.dashboard import trends

    user = getattr(context.get("request"), "user", None)
    if user is None:
        return {"trends": None}
    turns = user.has_perm("memproc.view_turnrecord")
    tripwires = user.has_perm("memproc.view_tripwirelog") or user.has_perm("memproc.change_tripwirelog")
    if not (turns or tripwires):
        return {"trends": None}
    return {"trends": trends(turns=turns, tripwires=tripwires)}


@register.filter
def memproc_day(day: date) -> SafeString:
    """A day as `<time>`, written 2026-11-30 whatever the locale."""
    return format_html('<time datetime="{0}">{0}</time>', day.isoformat())


@register.filter
def memproc_duration(ms: Any) -> str:
    """Milliseconds, readably: "0.04 ms", "3.2 ms", "143 ms", "2.31 s", "3 min 05 s"."""
    try:
        ms = float(ms)
    except (TypeError, ValueError):
        return "—"
    if ms < 1:
        return f"{ms:.2f} ms"
    if ms < 10:
        return f"{ms:.1f} ms"
    if ms < 1000:
        return f"{ms:.0f} ms"
    if ms < 60_000:
        return f"{ms / 1000:.2f} s"
    minutes, seconds = divmod(round(ms / 1000), 60)
    return f"{minutes} min {seconds:02d} s"
