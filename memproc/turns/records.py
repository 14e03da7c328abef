"""Turn records: one row per turn (RECORD_TURNS), with the manifest of what the model was given.

A completed turn's record is written inside the turn's own transaction (one INSERT); a blocked or
failed turn's on its own, after its tripwire log. Recording never fails a turn: a record that cannot
be written alone is logged and dropped.
"""

from __future__ import annotations

import logging
import uuid
from datetime import datetime
from typing import Any

from django.db import transaction

from memproc import logs, models
from memproc.db import memproc_db

__all__ = ["turn_record_alone", "turn_record_insert", "turn_record_row"]

logger = logging.getLogger(__name__)


def turn_record_insert(**fields: Any) -> None:
    """One INSERT; the caller's transaction decides its fate (a completed turn's save). Callers
    build a record only when RECORD_TURNS is on."""
    row = turn_record_row(**fields)
    row["tripwire_id"] = row.pop("tripwire")
    models.TurnRecord.objects.create(**row)


def turn_record_row(
    *,
    record_id: uuid.UUID,
    agent_id: str,
    thread_id: str | None,
    resource_id: str | None,
    status: str,
    model: str,
    steps: int,
    usage: dict[str, Any],
    manifest: dict[str, Any],
    message_ids: list[str],
    started_at: datetime,
    duration_ms: float,
    tripwire_id: Any = None,
    error: str = "",
) -> dict[str, Any]:
    """The record's fields, by name."""
    return {
        "id": record_id,
        "agent_id": agent_id or "",
        "thread_id": thread_id or "",
        "resource_id": resource_id or "",
        "status": status,
        "model": (model or "")[:255],
        "steps": steps,
        "usage": usage,
        "manifest": manifest,
        "message_ids": message_ids,
        "tripwire": tripwire_id,
        "error": error[:255],
        "started_at": started_at,
        "duration_ms": round(duration_ms, 3),
    }


def turn_record_alone(**fields: Any) -> None:
    """A blocked or failed turn's record, in its own transaction; never raises."""
    try:
        with transaction.atomic(using=memproc_db()):
            turn_record_insert(**fields)
    except Exception as exc:
        logs.failure(
            logger, "memproc: could not write the record of a %s turn", fields.get("status"), exc=exc
        )
