"""Reads of stored messages: a thread's window, neighbours of recalled hits, lookups by id."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from django.db.models import Q, QuerySet
from django.db.models.functions import Substr

from memproc import models
from memproc.exceptions import ValidationError
from memproc.messages import Message, message_from_content
from memproc.models import message_key, message_keys, public_thread_id, split_thread_key
from memproc.selectors.filters import metadata_filter

MESSAGE_FIELDS = ("public_id", "thread_id", "resource_id", "role", "content", "created_at", "sequence")


def message_from_row(row: dict[str, Any]) -> Message:
    return message_from_content(
        id=row["public_id"],
        role=row["role"],
        content=row["content"] or {},
        created_at=row["created_at"],
        thread_id=public_thread_id(row["thread_id"]),
        resource_id=row["resource_id"],
        sequence=row.get("sequence"),
    )


# A thread's window: the thread and resource of its rows are those of the thread's key, so the read
# leaves their columns out (each column read costs the ORM ~30 µs a query; bench/RESULTS.md).
WINDOW_FIELDS = ("public_id", "role", "content", "created_at", "sequence")


def messages_recent(*, thread_key: str, limit: int) -> list[Message]:
    """The newest `limit` messages of a thread, oldest first. One query on the thread+sequence index."""
    return window_messages(thread_key, messages_recent_rows(thread_key=thread_key, limit=limit))


def messages_recent_rows(
    *, thread_key: str, limit: int, thread_fields: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """The rows (WINDOW_FIELDS) of a thread's newest `limit` messages, oldest first, each with the
    thread's `thread_fields` as `thread__<name>` (joined on its primary key). One query on the
    thread+sequence index; none for a `limit` below 1."""
    if limit <= 0:
        return []
    related = [f"thread__{name}" for name in thread_fields]
    rows = (
        models.Message.objects.filter(thread_id=thread_key)
        .order_by("-sequence")
        .values(*WINDOW_FIELDS, *related)[:limit]
    )
    return list(rows)[::-1]


def window_messages(thread_key: str, rows: Iterable[Mapping[str, Any]]) -> list[Message]:
    """The messages of `messages_recent_rows`'s rows of the thread `thread_key`."""
    resource_id, thread_id = split_thread_key(thread_key)
    return [
        message_from_content(
            id=row["public_id"],
            role=row["role"],
            content=row["content"] or {},
            created_at=row["created_at"],
            thread_id=thread_id,
            resource_id=resource_id,
            sequence=row["sequence"],
        )
        for row in rows
    ]


def messages_existing(*, resource_id: str, ids: Iterable[str]) -> dict[str, tuple[str, str]]:
    """{message id: (resource id, thread id) of its thread} of `resource_id`'s ids that are stored."""
    rows = messages_existing_rows(resource_id=resource_id, ids=ids)
    return {message_id: split_thread_key(key) for message_id, key in rows}


def messages_existing_rows(*, resource_id: str, ids: Iterable[str]) -> list[tuple[str, str]]:
    """(message id, thread key) of `resource_id`'s ids that are stored. One query; none without ids."""
    keys = message_keys(resource_id, ids)
    if not keys:
        return []
    return list(models.Message.objects.filter(id__in=keys).values_list("public_id", "thread_id"))


def messages_around(*, message_keys: Sequence[str], before: int, after: int) -> dict[str, list[Message]]:
    """Each hit (by its key, as embeddings name it) with its neighbours from its own thread, grouped
    by thread in sequence order; messages a guardrail quarantined (`Message.quarantined`) or the user
    excluded from recall (`Message.recall_excluded`: not even as a hit, whatever a vector store still
    holds) are left out. Two queries: the hits' positions, then every range at once on the
    thread+sequence index."""
    if not message_keys:
        return {}
    # No order (the model's default joins the thread to sort by it): the ranges are OR'd together.
    hits = (
        models.Message.objects.filter(id__in=list(message_keys), recall_excluded=False)
        .order_by()
        .values_list("thread_id", "sequence")
    )
    ranges = Q()
    for key, sequence in hits:
        ranges |= Q(thread_id=key, sequence__range=(sequence - before, sequence + after))
    if not ranges:
        return {}
    rows = models.Message.objects.filter(ranges, quarantined=False, recall_excluded=False).order_by(
        "thread_id", "sequence"
    )
    grouped: dict[str, list[Message]] = {}
    for row in rows.values(*MESSAGE_FIELDS):
        message = message_from_row(row)
        grouped.setdefault(message.thread_id or "", []).append(message)
    return grouped


def messages_before(*, thread_key: str, before: int, limit: int) -> list[Message]:
    """The newest `limit` messages of a thread below sequence `before`, oldest first."""
    if limit <= 0:
        return []
    rows = thread_messages(thread_key=thread_key).filter(sequence__lt=before)
    return [message_from_row(row) for row in reversed(list(rows.reverse().values(*MESSAGE_FIELDS)[:limit]))]


def message_ids_from(*, thread_key: str, message_id: str) -> tuple[int | None, list[str]]:
    """A stored message's sequence and the ids of it and every later message of its thread, or
    (None, []) when the thread holds no such message."""
    start = message_sequence(thread_key=thread_key, message_id=message_id)
    if start is None:
        return None, []
    rows = thread_messages(thread_key=thread_key).filter(sequence__gte=start)
    return start, list(rows.values_list("public_id", flat=True))


def thread_messages(*, thread_key: str) -> QuerySet[models.Message]:
    return models.Message.objects.filter(thread_id=thread_key).order_by("sequence")


def message_keys_named(*, ids: Iterable[str], resource_id: str | None = None) -> list[str]:
    """The keys of the stored messages that the ids callers use name. With `resource_id`, that
    resource's (no query). Without, the one message each id names in any resource (one query): a
    ValidationError when several resources hold one of the ids, which then needs its resource."""
    ids = list(dict.fromkeys(ids))
    if resource_id is not None:
        return message_keys(resource_id, ids)
    rows = list(models.Message.objects.filter(public_id__in=ids).values_list("public_id", "pk"))
    shared = sorted({i for i, _ in rows if sum(1 for j, _ in rows if j == i) > 1})
    if shared:
        raise ValidationError(
            f"Message ids held by several resources: {', '.join(map(repr, shared))}; name the resource"
        )
    return [key for _, key in rows]


def message_excerpts(
    *, resource_id: str, message_ids: Iterable[str], length: int = 160
) -> dict[str, dict[str, Any]]:
    """`{id: {"id", "pk", "thread_id", "role", "sequence", "excerpt"}}` of `resource_id`'s messages
    that still exist: the head of each text, cut in SQL. One query."""
    ids = list(dict.fromkeys(i for i in message_ids if isinstance(i, str) and i))
    if not ids:
        return {}
    rows = models.Message.objects.filter(pk__in=message_keys(resource_id, ids)).values(
        "id", "public_id", "thread_id", "role", "sequence", excerpt=Substr("text", 1, length)
    )
    return {row["public_id"]: {**row, "pk": row["id"], "id": row["public_id"]} for row in rows}


def messages_filtered(
    *,
    thread_key: str | None = None,
    resource_id: str | None = None,
    start: datetime | None = None,
    end: datetime | None = None,
    thread_metadata: Mapping[str, Any] | None = None,
) -> QuerySet[models.Message]:
    """Messages of a thread and/or resource created between `start` and `end` (both inclusive, each
    optional) in threads whose metadata holds `thread_metadata`. The (resource, created_at) index
    serves a resource's date range."""
    qs = models.Message.objects.all()
    if thread_key is not None:
        qs = qs.filter(thread_id=thread_key)
    if resource_id is not None:
        qs = qs.filter(resource_id=resource_id)
    if start is not None:
        qs = qs.filter(created_at__gte=start)
    if end is not None:
        qs = qs.filter(created_at__lte=end)
    return metadata_filter(qs, thread_metadata, field="thread__metadata")


def messages_recent_filtered(
    *,
    thread_key: str,
    limit: int,
    start: datetime | None = None,
    end: datetime | None = None,
    thread_metadata: Mapping[str, Any] | None = None,
) -> list[Message]:
    """The newest `limit` messages of a thread that pass the filters of `messages_filtered`, oldest
    first. One query."""
    if limit <= 0:
        return []
    qs = messages_filtered(thread_key=thread_key, start=start, end=end, thread_metadata=thread_metadata)
    rows = qs.order_by("-sequence").values(*MESSAGE_FIELDS)[:limit]
    return [message_from_row(row) for row in reversed(list(rows))]


def messages_by_id(*, resource_id: str | None, ids: Iterable[str]) -> dict[str, Message]:
    """`resource_id`'s stored messages by id (ids that are not stored are missing); without a
    resource, see `message_keys_named`. One query, two without a resource."""
    keys = message_keys_named(ids=ids, resource_id=resource_id)
    rows = models.Message.objects.filter(id__in=keys).values(*MESSAGE_FIELDS)
    return {row["public_id"]: message_from_row(row) for row in rows}


def message_sequence(*, thread_key: str, message_id: str) -> int | None:
    """The position of a message in its thread, or None when the thread holds no such message."""
    resource_id, _ = split_thread_key(thread_key)
    return (
        models.Message.objects.filter(pk=message_key(resource_id, message_id), thread_id=thread_key)
        .values_list("sequence", flat=True)
        .first()
    )
