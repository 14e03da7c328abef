"""Reads for the end-user memory view: a resource's recent recalls (from its turn records) and the
messages its user excluded from recall."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models.functions import Substr

from memproc import models
from memproc.models import message_keys, public_thread_id

__all__ = ["ExcludedMessage", "RecallItem", "memory_recalls", "messages_recall_excluded"]

EXCERPT_CHARS = 160


@dataclass(frozen=True, slots=True)
class RecallItem:
    """One message a turn recalled, and why: its score (None for a neighbour of a hit) and thread.
    `excerpt` and `role` are None once the message is gone or quarantined."""

    message_id: str
    thread_id: str
    score: float | None
    turn_id: str
    turn_thread_id: str
    recalled_at: datetime
    role: str | None
    excerpt: str | None
    recall_excluded: bool


@dataclass(frozen=True, slots=True)
class ExcludedMessage:
    message_id: str
    thread_id: str
    role: str
    excerpt: str
    created_at: datetime


def memory_recalls(*, resource_id: str, turns: int = 20, limit: int = 50) -> list[RecallItem]:
    """What the resource's newest `turns` completed turns recalled, newest first, at most `limit`
    items. Two queries: the records (the resource+started index), then the messages still stored.
    Only ids from the resource's own records are looked up, and only within the resource."""
    records = (
        models.TurnRecord.objects.filter(resource_id=resource_id, status=models.TurnRecord.Status.COMPLETED)
        .order_by("-started_at")
        .values_list("id", "thread_id", "started_at", "manifest")[:turns]
    )
    hits: list[tuple[Mapping[str, Any], Any, str, datetime]] = []
    for record_id, thread_id, started_at, manifest in records:
        for item in _recalled(manifest):
            hits.append((item, record_id, thread_id, started_at))
    hits = hits[:limit]
    stored = _messages(resource_id, [str(item["id"]) for item, *_ in hits])
    out = []
    for item, record_id, thread_id, started_at in hits:
        message = stored.get(str(item["id"]))
        out.append(
            RecallItem(
                message_id=str(item["id"]),
                thread_id=public_thread_id(message["thread_id"])
                if message
                else str(item.get("thread_id") or ""),
                score=_score(item.get("score")),
                turn_id=str(record_id),
                turn_thread_id=thread_id,
                recalled_at=started_at,
                role=message["role"] if message else None,
                excerpt=message["excerpt"] if message else None,
                recall_excluded=bool(message and message["recall_excluded"]),
            )
        )
    return out


def messages_recall_excluded(*, resource_id: str, limit: int = 100) -> list[ExcludedMessage]:
    """The resource's messages excluded from recall, newest first (the partial index holds them)."""
    rows = (
        models.Message.objects.filter(resource_id=resource_id, recall_excluded=True)
        .order_by("-created_at")
        .values("public_id", "thread_id", "role", "created_at", excerpt=Substr("text", 1, EXCERPT_CHARS))[
            :limit
        ]
    )
    return [
        ExcludedMessage(
            message_id=row["public_id"],
            thread_id=public_thread_id(row["thread_id"]),
            role=row["role"],
            excerpt=row["excerpt"],
            created_at=row["created_at"],
        )
        for row in rows
    ]


def _recalled(manifest: Any) -> list[Mapping[str, Any]]:
    """A manifest's recalled entries that name a message; anything else stored there is skipped."""
    items = manifest.get("recalled") if isinstance(manifest, Mapping) else None
    if not isinstance(items, list):
        return []
    return [i for i in items if isinstance(i, Mapping) and isinstance(i.get("id"), str) and i["id"]]


def _score(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _messages(resource_id: str, ids: list[str]) -> dict[str, dict[str, Any]]:
    """The resource's messages among `ids` that still exist and are not quarantined. One query."""
    ids = list(dict.fromkeys(ids))
    if not ids:
        return {}
    rows = models.Message.objects.filter(pk__in=message_keys(resource_id, ids), quarantined=False).values(
        "public_id", "thread_id", "role", "recall_excluded", excerpt=Substr("text", 1, EXCERPT_CHARS)
    )
    return {row["public_id"]: row for row in rows}
