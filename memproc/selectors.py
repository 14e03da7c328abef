"""Reads used by processors (through the store), the API and the admin. Selectors never write."""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from django.db import router
from django.db.models import Count, FloatField, Max, Q, QuerySet, Sum, Value
from django.db.models.fields.json import KT, KeyTransform
from django.db.models.functions import Cast, Coalesce, Substr
from django.utils.dateparse import parse_datetime

from memproc import models
from memproc.exceptions import ThreadNotFoundError, ValidationError
from memproc.messages import Message, message_from_content
from memproc.models import public_thread_id, split_thread_key, thread_key

MESSAGE_FIELDS = ("id", "thread_id", "resource_id", "role", "content", "created_at", "sequence")


def _messages() -> QuerySet[models.Message]:
    """Messages on the database the project's router reads them from."""
    return models.Message.objects.db_manager(router.db_for_read(models.Message)).all()


def _threads() -> QuerySet[models.Thread]:
    return models.Thread.objects.db_manager(router.db_for_read(models.Thread)).all()


def message_from_row(row: dict[str, Any]) -> Message:
    return message_from_content(
        id=row["id"],
        role=row["role"],
        content=row["content"] or {},
        created_at=row["created_at"],
        thread_id=public_thread_id(row["thread_id"]),
        resource_id=row["resource_id"],
        sequence=row.get("sequence"),
    )


def messages_recent(*, thread_key: str, limit: int) -> list[Message]:
    """The newest `limit` messages of a thread, oldest first. One query on the thread+sequence index."""
    if limit <= 0:
        return []
    rows = _messages().filter(thread_id=thread_key).order_by("-sequence").values(*MESSAGE_FIELDS)[:limit]
    return [message_from_row(row) for row in reversed(list(rows))]


def messages_existing(*, ids: Iterable[str]) -> dict[str, tuple[str, str]]:
    """{message id: (resource id, thread id) of its thread} of the ids that are stored."""
    return {message_id: split_thread_key(key) for message_id, key in messages_existing_rows(ids=ids)}


def messages_existing_rows(*, ids: Iterable[str]) -> list[tuple[str, str]]:
    """(message id, thread key) of the ids that are stored. One query; none without ids."""
    ids = list(ids)
    if not ids:
        return []
    return list(_messages().filter(id__in=ids).values_list("id", "thread_id"))


def messages_around(*, message_ids: Sequence[str], before: int, after: int) -> dict[str, list[Message]]:
    """Each hit with its neighbours from its own thread, grouped by thread in sequence order; messages
    a guardrail quarantined (`Message.quarantined`) are left out. Two queries: the hits' positions,
    then every range at once on the thread+sequence index."""
    if not message_ids:
        return {}
    hits = _messages().filter(id__in=list(message_ids)).values_list("thread_id", "sequence")
    ranges = Q()
    for key, sequence in hits:
        ranges |= Q(thread_id=key, sequence__range=(sequence - before, sequence + after))
    if not ranges:
        return {}
    rows = _messages().filter(ranges, quarantined=False).order_by("thread_id", "sequence")
    grouped: dict[str, list[Message]] = {}
    for row in rows.values(*MESSAGE_FIELDS):
        message = message_from_row(row)
        grouped.setdefault(message.thread_id or "", []).append(message)
    return grouped


SUMMARY_FIELDS = ("text", "covered_sequence", "version", "counted_through", "counted_tokens")


def thread_read(
    *, thread_key: str, history: int = 0, summary: bool = False
) -> tuple[tuple[str, str, int] | None, tuple[Any, ...] | None, list[Message] | None]:
    """A turn's first read: the thread's (resource id, title, last sequence) or None; with `summary`
    its compaction summary's fields (SUMMARY_FIELDS; None without one); with `history` its newest
    `history` messages, oldest first (None when not asked for). One query, plus one for each."""
    owner = thread_owner(thread_key=thread_key)
    if owner is None:
        return None, None, None
    summary_row = None
    if summary:
        summary_row = (
            models.ThreadSummary.objects.db_manager(router.db_for_read(models.ThreadSummary))
            .filter(thread_id=thread_key)
            .order_by()
            .values_list(*SUMMARY_FIELDS)
            .first()
        )
    recent = messages_recent(thread_key=thread_key, limit=history) if history > 0 else None
    return owner, summary_row, recent


def thread_owner(*, thread_key: str) -> tuple[str, str, int] | None:
    """(resource id, title, last sequence) of a thread, or None. One query."""
    return (
        _threads()
        .filter(pk=thread_key)
        .order_by()
        .values_list("resource_id", "title", "last_sequence")
        .first()
    )


def thread_get(*, thread_id: str, resource_id: str) -> models.Thread | None:
    """The thread, or None. One query."""
    return _threads().filter(pk=thread_key(resource_id, thread_id)).first()


def threads_named(*, thread_id: str, resource_ids: Iterable[str] | None = None) -> list[models.Thread]:
    """The threads called `thread_id` in `resource_ids` (None: in every resource), at most two: enough
    to tell a caller who named no resource that the id is ambiguous."""
    qs = models.Thread.objects.filter(public_id=thread_id)
    if resource_ids is not None:
        qs = qs.filter(resource_id__in=list(resource_ids))
    return list(qs.order_by("key")[:2])


def thread_named(*, thread_id: str, resource_ids: Iterable[str] | None = None) -> models.Thread | None:
    """The one thread called `thread_id` in `resource_ids` (None: in every resource), or None. A thread
    id names a thread within its resource, so an id that several of them use is a ValidationError: the
    caller must name the resource. One query."""
    found = threads_named(thread_id=thread_id, resource_ids=resource_ids)
    if len(found) > 1:
        raise ValidationError(f"Several resources have a thread {thread_id!r}; pass resource_id")
    return found[0] if found else None


def thread_key_for(*, thread_id: str, resource_id: str | None = None) -> str:
    """The key of `resource_id`'s thread `thread_id` (no query). Without a resource, the key of the one
    thread with that id (one query): a ThreadNotFoundError when there is none, a ValidationError
    when several resources use the id."""
    if resource_id is not None:
        return thread_key(resource_id, thread_id)
    thread = thread_named(thread_id=thread_id)
    if thread is None:
        raise ThreadNotFoundError(f"No thread {thread_id!r}")
    return thread.pk


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
    ids = thread_messages(thread_key=thread_key).filter(sequence__gte=start).values_list("pk", flat=True)
    return start, list(ids)


def thread_messages(*, thread_key: str) -> QuerySet[models.Message]:
    return models.Message.objects.filter(thread_id=thread_key).order_by("sequence")


def threads_for_resources(*, resource_ids: Iterable[str] | None) -> QuerySet[models.Thread]:
    """Threads visible to a caller; `None` means every resource (staff)."""
    qs = models.Thread.objects.all()
    if resource_ids is not None:
        qs = qs.filter(resource_id__in=list(resource_ids))
    return qs.order_by("-updated_at", "key")


def threads_with_stats() -> QuerySet[models.Thread]:
    return models.Thread.objects.select_related("resource").annotate(
        message_count=Count("messages", distinct=True), last_message_at=Max("messages__created_at")
    )


def working_memory_get(*, scope: str, key: str) -> tuple[str, int]:
    """(text, version) of a thread's or resource's working memory; ("", 0) when there is none."""
    model = models.Thread if scope == "thread" else models.Resource
    rows = model.objects.db_manager(router.db_for_read(model)).filter(pk=key)
    return rows.order_by().values_list("working_memory", "working_memory_version").first() or ("", 0)


def tripwires_pending_count() -> int:
    return models.TripwireLog.objects.filter(status=models.TripwireLog.Status.PENDING).count()


# --- turn records ------------------------------------------------------------------------------------


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


# --- thread lists, metadata filters, filtered message reads ------------------------------------------

# What a list of threads may be ordered by; a leading "-" is newest first. The id breaks ties.
THREAD_ORDERINGS = ("-updated_at", "updated_at", "-created_at", "created_at")
METADATA_SCALARS = (str, int, float, bool, type(None))


def metadata_filter(
    queryset: QuerySet[Any],
    metadata: Mapping[str, Any] | None,
    *,
    field: str = "metadata",
    loose: bool = False,
) -> QuerySet[Any]:
    """Rows whose JSON `field` holds every key of `metadata` with that value (JSON equality).

    Values are scalars (a string, number, boolean or None for JSON null). A key is one top-level key,
    taken literally (`a__b` is the key "a__b", never a path or a lookup). With `loose`, for values
    from a query string, a string also matches the JSON number, boolean or null it spells ("3"
    matches 3 and "3", "true" matches true and "true").
    """
    for index, (key, value) in enumerate((metadata or {}).items()):
        if not isinstance(key, str) or not key or "\x00" in key or len(key) > 255:
            raise ValidationError(f"A metadata filter key must be a non-empty string, not {key!r}")
        if not isinstance(value, METADATA_SCALARS) or (isinstance(value, str) and "\x00" in value):
            raise ValidationError(f"metadata[{key!r}]: filter values are strings, numbers, booleans or None")
        if isinstance(value, float) and not math.isfinite(value):
            raise ValidationError(f"metadata[{key!r}]: a number must be finite")
        alias = f"memproc_meta_{index}"
        queryset = queryset.alias(**{alias: KeyTransform(key, field)})
        match = Q()
        for candidate in _loose_values(value) if loose else [value]:
            match |= Q(**{alias: candidate})
        queryset = queryset.filter(match)
    return queryset


def _loose_values(value: Any) -> list[Any]:
    if not isinstance(value, str):
        return [value]
    try:
        literal = json.loads(value)
    except ValueError:
        return [value]
    is_scalar = literal is None or isinstance(literal, (bool, int, float))
    if not is_scalar or (isinstance(literal, float) and not math.isfinite(literal)):
        return [value]
    return [value, literal]


class ThreadList(list):  # type: ignore[type-arg]
    """A page of threads that knows the cursor of the next page (None: this is the last one)."""

    def __init__(self, threads: Iterable[models.Thread] = (), *, next_cursor: str | None = None) -> None:
        super().__init__(threads)
        self.next_cursor = next_cursor


def threads_page(
    *,
    resource_ids: Iterable[str] | None,
    limit: int | None = None,
    cursor: str | None = None,
    order_by: str = "-updated_at",
    metadata: Mapping[str, Any] | None = None,
) -> ThreadList:
    """A page of threads in a stable order (`order_by`, then id), narrowed by thread metadata.

    `cursor` is the `next_cursor` of the previous page (opaque; it remembers the order it was made
    for). Keyset paging: one query per page whatever the page's depth, on the (resource, updated_at)
    index. `limit` None returns every remaining thread (and no next cursor).
    """
    if order_by not in THREAD_ORDERINGS:
        raise ValidationError(f"order_by must be one of {', '.join(THREAD_ORDERINGS)}, not {order_by!r}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValidationError("limit must be a positive integer or None")
    field = order_by.lstrip("-")
    qs = metadata_filter(threads_for_resources(resource_ids=resource_ids), metadata)
    if cursor:
        value, last_id = _thread_cursor_decode(cursor, order_by)
        past = Q(**{f"{field}__{'lt' if order_by.startswith('-') else 'gt'}": value})
        qs = qs.filter(past | Q(**{field: value, "key__gt": last_id}))
    qs = qs.order_by(order_by, "key")
    if limit is None:
        return ThreadList(qs)
    rows = list(qs[: limit + 1])
    if len(rows) <= limit:
        return ThreadList(rows)
    last = rows[limit - 1]
    return ThreadList(
        rows[:limit], next_cursor=_thread_cursor_encode(order_by, getattr(last, field), last.pk)
    )


def _thread_cursor_encode(order_by: str, value: datetime, thread_id: str) -> str:
    raw = json.dumps({"o": order_by, "v": value.isoformat(), "id": thread_id}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode("ascii").rstrip("=")


def _thread_cursor_decode(cursor: str, order_by: str) -> tuple[datetime, str]:
    try:
        raw = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        value = parse_datetime(raw["v"])
        thread_id = raw["id"]
        made_for = raw["o"]
    except (ValueError, TypeError, KeyError, binascii.Error) as exc:
        raise ValidationError("Not a cursor of list_threads") from exc
    if value is None or not isinstance(thread_id, str) or "\x00" in thread_id:
        raise ValidationError("Not a cursor of list_threads")
    if made_for != order_by:
        raise ValidationError(f"This cursor was made for order_by={made_for!r}, not {order_by!r}")
    return (value if value.tzinfo else value.replace(tzinfo=UTC)), thread_id


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


def messages_by_id(*, ids: Iterable[str]) -> dict[str, Message]:
    """Stored messages by id (ids that are not stored are missing). One query."""
    rows = models.Message.objects.filter(id__in=list(ids)).values(*MESSAGE_FIELDS)
    return {row["id"]: message_from_row(row) for row in rows}


def message_sequence(*, thread_key: str, message_id: str) -> int | None:
    """The position of a message in its thread, or None when the thread holds no such message."""
    return (
        models.Message.objects.filter(pk=message_id, thread_id=thread_key)
        .values_list("sequence", flat=True)
        .first()
    )


def resource_rows(*, resource_id: str) -> dict[str, QuerySet[Any]]:
    """Everything stored about one resource, by kind: what a purge deletes and an export holds.

    Rows are found by the resource's id and also through its threads (a revision, turn record or
    tripwire log names a thread; a message or attachment may carry a stale resource id).
    """
    thread_keys = models.Thread.objects.filter(resource_id=resource_id).values("key")
    thread_ids = models.Thread.objects.filter(resource_id=resource_id).values("public_id")
    messages = models.Message.objects.filter(Q(resource_id=resource_id) | Q(thread_id__in=thread_keys))
    return {
        "threads": models.Thread.objects.filter(resource_id=resource_id),
        "messages": messages,
        "embeddings": models.MessageEmbedding.objects.filter(
            Q(resource_id=resource_id) | Q(message_id__in=messages.values("id"))
        ),
        "working_memory_revisions": models.WorkingMemoryRevision.objects.filter(
            Q(scope=models.WorkingMemoryRevision.Scope.RESOURCE, key=resource_id)
            | Q(scope=models.WorkingMemoryRevision.Scope.THREAD, key__in=thread_keys)
            | Q(thread_id__in=thread_keys)
        ),
        "attachments": models.Attachment.objects.filter(
            Q(resource_id=resource_id) | Q(message_id__in=messages.values("id"))
        ),
        # A record or log written before its resource was known (resource_id "") names the thread by
        # its id alone: it goes with any resource that has a thread of that id (a purge errs on deleting).
        "turn_records": models.TurnRecord.objects.filter(
            Q(resource_id=resource_id) | Q(resource_id="", thread_id__in=thread_ids)
        ),
        "tripwire_logs": models.TripwireLog.objects.filter(
            Q(resource_id=resource_id) | Q(resource_id="", thread_id__in=thread_ids)
        ),
        "resource": models.Resource.objects.filter(pk=resource_id),
    }
