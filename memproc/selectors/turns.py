"""Reads of turn records: a thread's turns, their tokens and durations."""

from __future__ import annotations

from datetime import datetime

from django.db.models import FloatField, QuerySet, Value
from django.db.models.fields.json import KT
from django.db.models.functions import Cast, Coalesce

from memproc import models


def thread_turns(*, thread_id: str, resource_id: str) -> QuerySet[models.TurnRecord]:
    """A thread's turn records, newest first (the `memproc_turn_thread` index)."""
    return models.TurnRecord.objects.filter(thread_id=thread_id, resource_id=resource_id).order_by(
        "-started_at", "id"
    )


def thread_turns_until(
    *, thread_id: str, resource_id: str, until: datetime | None, limit: int
) -> list[models.TurnRecord]:
    """The newest `limit` completed turns of a thread that started at or before `until` (None: any
    time), newest first. One query. Only completed turns saved messages for a transcript to show."""
    records = thread_turns(thread_id=thread_id, resource_id=resource_id).filter(
        status=models.TurnRecord.Status.COMPLETED
    )
    if until is not None:
        records = records.filter(started_at__lte=until)
    return list(records[:limit])


def _usage_number(key: str) -> Cast:
    return Cast(KT(f"usage__{key}"), FloatField())


def turn_tokens() -> Coalesce:
    """A record's tokens: the usage's `total_tokens`, else prompt + completion tokens."""
    prompt = Coalesce(_usage_number("prompt_tokens"), Value(0.0))
    completion = Coalesce(_usage_number("completion_tokens"), Value(0.0))
    return Coalesce(_usage_number("total_tokens"), prompt + completion)


def turn_durations(*, records: QuerySet[models.TurnRecord], limit: int) -> list[float]:
    """The durations (ms) of the newest `limit` of `records`. One query."""
    return list(records.order_by("-started_at").values_list("duration_ms", flat=True)[:limit])
