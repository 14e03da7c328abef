"""Tripwire logs: written for every blocked turn, reviewed by operators."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from django.db import transaction
from django.utils import timezone

from memproc import models
from memproc.conf import settings
from memproc.db import memproc_db
from memproc.events import Tripwire
from memproc.exceptions import ValidationError
from memproc.messages import Message
from memproc.services.attachments import messages_without_file_data
from memproc.signals import tripwire_triggered


def tripwire_log(
    *,
    tripwire: Tripwire,
    agent_id: str,
    thread_id: str | None,
    resource_id: str | None,
    messages: Sequence[Message] = (),
) -> models.TripwireLog:
    """Writes the log row in its own transaction, then sends `tripwire_triggered`.

    The turn's own writes are never part of this transaction: a blocked turn saves nothing, but its
    log stays. (Inside a caller's outer atomic block the row shares that block's fate; memproc's views
    are non-atomic for this reason.)
    """
    # Never the bytes of a blocked file: a 50 MB upload must not end up in a log row.
    content = [{"id": m.id, "role": m.role, **m.to_content()} for m in messages_without_file_data(messages)]
    with transaction.atomic(using=memproc_db()):
        log = models.TripwireLog.objects.create(
            agent_id=agent_id or "",
            processor_id=tripwire.processor_id,
            phase=tripwire.phase,
            reason=tripwire.reason,
            retry=tripwire.retry,
            metadata=_json_safe(tripwire.metadata),
            thread_id=thread_id or "",
            resource_id=resource_id or "",
            content=content if settings.STORE_BLOCKED_CONTENT else None,
        )
    tripwire_triggered.send(
        sender=models.TripwireLog,
        tripwire=tripwire,
        log=log,
        agent_id=agent_id,
        thread_id=thread_id,
        resource_id=resource_id,
    )
    return log


def tripwire_review(
    *, log: models.TripwireLog, status: str, reviewer: Any, note: str = ""
) -> models.TripwireLog:
    if status not in models.TripwireLog.Status.values:
        raise ValidationError(f"Unknown review status {status!r}")
    log.status = status
    log.note = note
    log.reviewed_by = reviewer if getattr(reviewer, "is_authenticated", False) else None
    log.reviewed_at = timezone.now() if status != models.TripwireLog.Status.PENDING else None
    log.save(update_fields=["status", "note", "reviewed_by", "reviewed_at"])
    return log


def _json_safe(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))
