"""Reads used by processors (through the store), the API and the admin. Selectors never write."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from django.db import connection
from django.db.models import Count, FloatField, Max, Q, QuerySet, Sum, Value
from django.db.models.fields.json import KT
from django.db.models.functions import Cast, Coalesce, Substr
from django.utils.dateparse import parse_datetime

from memproc import models
from memproc.messages import Message, message_from_content

MESSAGE_FIELDS = ("id", "thread_id", "resource_id", "role", "content", "created_at", "sequence")

# The per-turn reads below are plain SQL: the ORM spends ~1 ms compiling each query on a 2-core
# machine, more than the database spends answering them. Anything not on a turn's path uses the ORM.
_MESSAGE_COLUMNS = "m.id, m.thread_id, m.resource_id, m.role, m.content, m.created_at, m.sequence"


def _table(model: type[models.Model]) -> str:
    return connection.ops.quote_name(model._meta.db_table)


def _fetch(sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def _datetime(value: Any) -> datetime | None:
    """SQLite hands back text or a naive datetime; PostgreSQL an aware one. Stored values are UTC,
    and naive ones would sort by local time (wrong across a daylight-saving change)."""
    if value is None:
        return None
    parsed = value if isinstance(value, datetime) else parse_datetime(str(value))
    if parsed is not None and parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed


def _message_from_raw(row: Sequence[Any]) -> Message:
    content = row[4]
    if isinstance(content, (str, bytes)):
        content = json.loads(content)
    return message_from_content(
        id=row[0],
        thread_id=row[1],
        resource_id=row[2],
        role=row[3],
        content=content or {},
        created_at=_datetime(row[5]),
        sequence=row[6],
    )


def message_from_row(row: dict[str, Any]) -> Message:
    return message_from_content(
        id=row["id"],
        role=row["role"],
        content=row["content"] or {},
        created_at=row["created_at"],
        thread_id=row["thread_id"],
        resource_id=row["resource_id"],
        sequence=row.get("sequence"),
    )


def messages_recent(*, thread_id: str, limit: int, last_sequence: int | None = None) -> list[Message]:
    """The newest `limit` messages of a thread, oldest first. One query on the thread+sequence index.

    With the thread's `last_sequence` (the turn already read it) the query is a bounded range that
    touches `limit` rows whatever the planner's statistics say; after a bulk load, stale statistics
    made PostgreSQL scan and sort the whole thread for the plain ORDER BY ... LIMIT. A range that
    comes back short (messages were deleted) falls back to that plain query.
    """
    if limit <= 0:
        return []
    table = _table(models.Message)
    if last_sequence is not None:
        rows = _fetch(
            f"SELECT {_MESSAGE_COLUMNS} FROM {table} m WHERE m.thread_id = %s AND m.sequence > %s "
            "ORDER BY m.sequence",
            [thread_id, last_sequence - limit],
        )
        if len(rows) >= min(limit, last_sequence):
            return [_message_from_raw(r) for r in rows[-limit:]]
    rows = _fetch(
        f"SELECT {_MESSAGE_COLUMNS} FROM {table} m WHERE m.thread_id = %s ORDER BY m.sequence DESC LIMIT %s",
        [thread_id, limit],
    )
    return [_message_from_raw(r) for r in reversed(rows)]


def messages_existing(*, ids: Iterable[str]) -> dict[str, str]:
    ids = list(ids)
    if not ids:
        return {}
    marks = ", ".join(["%s"] * len(ids))
    return dict(_fetch(f"SELECT id, thread_id FROM {_table(models.Message)} WHERE id IN ({marks})", ids))


def messages_around(*, message_ids: Sequence[str], before: int, after: int) -> dict[str, list[Message]]:
    """Each hit with its neighbours from its own thread, grouped by thread in sequence order.

    One query whatever the number of hits: the hits joined to their ranges on the thread+sequence index.
    """
    if not message_ids:
        return {}
    table = _table(models.Message)
    marks = ", ".join(["%s"] * len(message_ids))
    rows = _fetch(
        f"SELECT DISTINCT {_MESSAGE_COLUMNS} FROM {table} h JOIN {table} m "
        "ON m.thread_id = h.thread_id AND m.sequence BETWEEN h.sequence - %s AND h.sequence + %s "
        f"WHERE h.id IN ({marks}) ORDER BY m.thread_id, m.sequence",
        [before, after, *message_ids],
    )
    grouped: dict[str, list[Message]] = {}
    for row in rows:
        grouped.setdefault(row[1], []).append(_message_from_raw(row))
    return grouped


def thread_owner(*, thread_id: str) -> tuple[str, str, int] | None:
    """(resource id, title, last sequence) of a thread, or None. One query."""
    rows = _fetch(
        f"SELECT resource_id, title, last_sequence FROM {_table(models.Thread)} WHERE id = %s", [thread_id]
    )
    return (rows[0][0], rows[0][1], int(rows[0][2])) if rows else None


def thread_get(*, thread_id: str) -> models.Thread | None:
    return models.Thread.objects.filter(pk=thread_id).first()


def thread_messages(*, thread_id: str) -> QuerySet[models.Message]:
    return models.Message.objects.filter(thread_id=thread_id).order_by("sequence")


def threads_for_resources(*, resource_ids: Iterable[str] | None) -> QuerySet[models.Thread]:
    """Threads visible to a caller; `None` means every resource (staff)."""
    qs = models.Thread.objects.all()
    if resource_ids is not None:
        qs = qs.filter(resource_id__in=list(resource_ids))
    return qs.order_by("-updated_at", "id")


def threads_with_stats() -> QuerySet[models.Thread]:
    return models.Thread.objects.select_related("resource").annotate(
        message_count=Count("messages", distinct=True), last_message_at=Max("messages__created_at")
    )


def working_memory_get(*, scope: str, key: str) -> tuple[str, int]:
    """(text, version) of a thread's or resource's working memory; ("", 0) when there is none."""
    model = models.Thread if scope == "thread" else models.Resource
    rows = _fetch(f"SELECT working_memory, working_memory_version FROM {_table(model)} WHERE id = %s", [key])
    return (rows[0][0], int(rows[0][1])) if rows else ("", 0)


def tripwires_pending_count() -> int:
    return models.TripwireLog.objects.filter(status=models.TripwireLog.Status.PENDING).count()


# --- turn records ------------------------------------------------------------------------------------


def thread_turns(*, thread_id: str) -> QuerySet[models.TurnRecord]:
    """A thread's turn records, newest first (the `memproc_turn_thread` index)."""
    return models.TurnRecord.objects.filter(thread_id=thread_id).order_by("-started_at", "id")


def thread_turns_until(*, thread_id: str, until: datetime | None, limit: int) -> list[models.TurnRecord]:
    """The newest `limit` completed turns of a thread that started at or before `until` (None: any
    time), newest first. One query. Only completed turns saved messages for a transcript to show."""
    records = thread_turns(thread_id=thread_id).filter(status=models.TurnRecord.Status.COMPLETED)
    if until is not None:
        records = records.filter(started_at__lte=until)
    return list(records[:limit])


def message_excerpts(*, message_ids: Iterable[str], length: int = 160) -> dict[str, dict[str, Any]]:
    """`{id: {"thread_id", "role", "sequence", "excerpt"}}` of the messages that still exist: the head
    of each text, cut in SQL. One query."""
    ids = list(dict.fromkeys(i for i in message_ids if isinstance(i, str) and i))
    if not ids:
        return {}
    rows = models.Message.objects.filter(pk__in=ids).values(
        "id", "thread_id", "role", "sequence", excerpt=Substr("text", 1, length)
    )
    return {row["id"]: row for row in rows}


def _usage_number(key: str) -> Cast:
    return Cast(KT(f"usage__{key}"), FloatField())


def turn_tokens() -> Coalesce:
    """A record's tokens: the usage's `total_tokens`, else prompt + completion tokens."""
    prompt = Coalesce(_usage_number("prompt_tokens"), Value(0.0))
    completion = Coalesce(_usage_number("completion_tokens"), Value(0.0))
    return Coalesce(_usage_number("total_tokens"), prompt + completion)


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


def turn_durations(*, records: QuerySet[models.TurnRecord], limit: int) -> list[float]:
    """The durations (ms) of the newest `limit` of `records`. One query."""
    return list(records.order_by("-started_at").values_list("duration_ms", flat=True)[:limit])
