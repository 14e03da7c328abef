"""Reads used by processors (through the store), the API and the admin. Selectors never write."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from django.db.models import Count, Max, Q, QuerySet

from memproc import models
from memproc.messages import Message, message_from_content

MESSAGE_FIELDS = ("id", "thread_id", "resource_id", "role", "content", "created_at", "sequence")


def message_from_row(row: dict[str, Any]) -> Message:
    return message_from_content(
        id=row["id"],
        role=row["role"],
        content=row["content"] or {},
        created_at=row["created_at"],
        thread_id=row["thread_id"],
        resource_id=row["resource_id"],
    )


def messages_recent(*, thread_id: str, limit: int) -> list[Message]:
    """The newest `limit` messages of a thread, oldest first. One query (the thread+sequence index)."""
    if limit <= 0:
        return []
    rows = list(
        models.Message.objects.filter(thread_id=thread_id).order_by("-sequence").values(*MESSAGE_FIELDS)[:limit]
    )
    rows.reverse()
    return [message_from_row(r) for r in rows]


def messages_existing(*, ids: Iterable[str]) -> dict[str, str]:
    ids = list(ids)
    if not ids:
        return {}
    return dict(models.Message.objects.filter(id__in=ids).values_list("id", "thread_id"))


def messages_around(*, message_ids: Sequence[str], before: int, after: int) -> dict[str, list[Message]]:
    """Each hit with its neighbours from its own thread, grouped by thread in sequence order.

    Two queries whatever the number of hits: the hits' positions, then every range in one OR.
    """
    if not message_ids:
        return {}
    hits = list(models.Message.objects.filter(id__in=message_ids).values_list("thread_id", "sequence"))
    if not hits:
        return {}
    ranges = Q()
    for thread_id, sequence in hits:
        ranges |= Q(thread_id=thread_id, sequence__gte=sequence - before, sequence__lte=sequence + after)
    rows = models.Message.objects.filter(ranges).order_by("thread_id", "sequence").values(*MESSAGE_FIELDS)
    grouped: dict[str, list[Message]] = {}
    for row in rows:
        grouped.setdefault(row["thread_id"], []).append(message_from_row(row))
    return grouped


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
    model = models.Thread if scope == "thread" else models.Resource
    row = model.objects.filter(pk=key).values_list("working_memory", "working_memory_version").first()
    return row if row else ("", 0)


def tripwires_pending_count() -> int:
    return models.TripwireLog.objects.filter(status=models.TripwireLog.Status.PENDING).count()
