"""Reads of threads: a turn's first read, lookups by id, keyset-paged lists, working memory."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, NamedTuple

from django.db.models import Q, QuerySet
from django.utils.dateparse import parse_datetime

from memproc import models
from memproc.exceptions import ThreadNotFoundError, ValidationError
from memproc.messages import Message
from memproc.models import split_thread_key, thread_key
from memproc.selectors.filters import metadata_filter
from memproc.selectors.messages import messages_recent_rows, window_messages

SUMMARY_FIELDS = ("text", "covered_sequence", "version", "counted_through", "counted_tokens")


class ThreadRead(NamedTuple):
    """What a turn's first read found (see `thread_read`)."""

    owner: tuple[str, str, int] | None  # (resource id, title, last sequence); None: no such thread
    summary: tuple[Any, ...] | None  # SUMMARY_FIELDS of its compaction summary
    recent: list[Message] | None  # its newest messages, oldest first
    memory: tuple[str, int] | None  # its working memory's (text, version)


def thread_read(
    *, thread_key: str, history: int = 0, summary: bool = False, memory: bool = False
) -> ThreadRead:
    """A turn's first read: the thread's owner, with `memory` its working memory in the same query;
    with `summary` its compaction summary's fields (None without one); with `history` its newest
    `history` messages (None when not asked for).

    With `history`, one query reads the window with the thread's columns on each row; only a thread
    that holds no message (or does not exist) costs a second, the thread's own read. Without, the
    thread's read alone. One more query with `summary`."""
    fields = ("resource_id", "title", "last_sequence")
    if memory:
        fields += ("working_memory", "working_memory_version")
    row: tuple[Any, ...] | None = None
    recent: list[Message] | None = None
    if history > 0:
        # The thread's resource is its key's (no column read for it).
        joined = fields[1:]
        rows = messages_recent_rows(thread_key=thread_key, limit=history, thread_fields=joined)
        if rows:
            row = (split_thread_key(thread_key)[0], *(rows[-1][f"thread__{name}"] for name in joined))
            recent = window_messages(thread_key, rows)
    if row is None:
        row = models.Thread.objects.filter(pk=thread_key).order_by().values_list(*fields).first()
        if row is None:
            return ThreadRead(None, None, None, None)
        recent = [] if history > 0 else None
    summary_row = None
    if summary:
        summary_row = (
            models.ThreadSummary.objects.filter(thread_id=thread_key)
            .order_by()
            .values_list(*SUMMARY_FIELDS)
            .first()
        )
    return ThreadRead(row[:3], summary_row, recent, (row[3], int(row[4])) if memory else None)


def thread_owner(*, thread_key: str) -> tuple[str, str, int] | None:
    """(resource id, title, last sequence) of a thread, or None. One query."""
    return thread_read(thread_key=thread_key).owner


def thread_get(*, thread_id: str, resource_id: str) -> models.Thread | None:
    """The thread, or None. One query."""
    return models.Thread.objects.filter(pk=thread_key(resource_id, thread_id)).first()


def threads_named(*, thread_id: str, resource_ids: Iterable[str] | None = None) -> list[models.Thread]:
    """The threads called `thread_id` in `resource_ids` (None: in every resource), at most two: enough
    to tell a caller who named no resource that the id is ambiguous."""
    qs = models.Thread.objects.filter(public_id=thread_id)
    if resource_ids is not None:
        qs = qs.filter(resource_id__in=list(resource_ids))
    return list(qs.order_by("id")[:2])


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


def threads_for_resources(*, resource_ids: Iterable[str] | None) -> QuerySet[models.Thread]:
    """Threads visible to a caller; `None` means every resource (staff)."""
    qs = models.Thread.objects.all()
    if resource_ids is not None:
        qs = qs.filter(resource_id__in=list(resource_ids))
    return qs.order_by("-updated_at", "id")


def threads_archived(*, resource_id: str) -> list[str]:
    """The ids of a resource's archived threads. One query, on the partial index that holds only
    archived threads (for most resources, none)."""
    return list(
        models.Thread.objects.filter(resource_id=resource_id, archived_at__isnull=False)
        .order_by()
        .values_list("public_id", flat=True)
    )


def working_memory_get(*, scope: str, key: str) -> tuple[str, int]:
    """(text, version) of a thread's or resource's working memory; ("", 0) when there is none."""
    model = models.Thread if scope == "thread" else models.Resource
    rows = model.objects.filter(pk=key)
    return rows.order_by().values_list("working_memory", "working_memory_version").first() or ("", 0)


def resource_memory_get(*, resource_id: str) -> tuple[str, int, tuple[str, ...]]:
    """(text, version, pinned field names) of a resource's working memory, in one query: a turn
    reads the pins with the value, so keeping them costs it nothing."""
    row = (
        models.Resource.objects.filter(pk=resource_id)
        .order_by()
        .values_list("working_memory", "working_memory_version", "pinned_fields")
        .first()
    )
    if row is None:
        return "", 0, ()
    return row[0], row[1], pinned_names(row[2])


def pinned_names(value: Any) -> tuple[str, ...]:
    """The stored `Resource.pinned_fields` as names (anything else stored there is ignored)."""
    return tuple(n for n in value if isinstance(n, str)) if isinstance(value, list) else ()


# What a list of threads may be ordered by; a leading "-" is newest first. The id breaks ties.
THREAD_ORDERINGS = ("-updated_at", "updated_at", "-created_at", "created_at")


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
    archived: bool | None = None,
) -> ThreadList:
    """A page of threads in a stable order (`order_by`, then id), narrowed by thread metadata and,
    with `archived` True or False, to archived threads or to the others.

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
    if archived is not None:
        qs = qs.filter(archived_at__isnull=not archived)
    if cursor:
        value, last_id = _thread_cursor_decode(cursor, order_by)
        past = Q(**{f"{field}__{'lt' if order_by.startswith('-') else 'gt'}": value})
        qs = qs.filter(past | Q(**{field: value, "id__gt": last_id}))
    qs = qs.order_by(order_by, "id")
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
