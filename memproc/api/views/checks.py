"""Checks of a turn's input that need the database: attachments a client names must be its own."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from typing import Any

from rest_framework import serializers

from memproc import models


def attachment_ids(messages: Any) -> set[str]:
    """Ids of `{"type": "attachment", "attachment_id": ...}` parts anywhere in the raw input."""
    return {str(part["attachment_id"]) for part in _parts(messages) if part.get("type") == "attachment"}


def attachments_check(messages: Any, *, resource_id: str | None) -> None:
    """A message may reference only attachments of the turn's resource (else another owner's file could
    reach the model); an unknown or foreign id is a field error, the same for both."""
    wanted = {raw: _uuid(raw) for raw in attachment_ids(messages)}
    if not wanted:
        return
    valid = [u for u in wanted.values() if u is not None]
    owned = {
        str(pk)
        for pk in models.Attachment.objects.filter(pk__in=valid, resource_id=resource_id or "").values_list(
            "pk", flat=True
        )
    }
    missing = sorted(raw for raw, u in wanted.items() if u is None or u not in owned)
    if missing:
        raise serializers.ValidationError({"messages": [f"Unknown attachment: {', '.join(missing[:5])}"]})


def _parts(value: Any) -> Iterator[Mapping[str, Any]]:
    items = value if isinstance(value, list) else [value]
    for item in items:
        if not isinstance(item, Mapping):
            continue
        for key in ("parts", "content"):
            parts = item.get(key)
            if isinstance(parts, list):
                yield from (p for p in parts if isinstance(p, Mapping) and "attachment_id" in p)


def _uuid(value: str) -> str | None:
    try:
        return str(uuid.UUID(value))
    except ValueError:
        return None
