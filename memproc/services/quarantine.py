"""Quarantined messages: an operator confirms or clears a guardrail's flag, or flags a message by hand.

The flag lives with the message, in `content["metadata"]["quarantine"]` (a guardrail writes it when the
turn saves; see memproc.guardrails._channels); the database derives `Message.quarantined` from its
status, and history and recall skip quarantined messages. So a review is one UPDATE of the content:
"confirmed" and "flagged" keep the message out of memory, "cleared" lets it back in. A message that
becomes quarantined loses its embeddings (recall cannot find it any more); a cleared one is embedded
again after commit, and a compaction summary that covers one is dropped and folded again without it.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from memproc import background, models
from memproc.db import memproc_db
from memproc.exceptions import ValidationError
from memproc.services.messages import summaries_forget
from memproc.vectors import forget_cached

STATUSES = ("flagged", "confirmed", "cleared")


def message_quarantine_review(
    *, message: models.Message, status: str, reviewer: Any = None, note: str = ""
) -> models.Message:
    """Sets the flag's status (creating an operator's flag when the message had none) and returns the
    message as stored. One UPDATE, plus the embeddings' DELETE or a re-embedding job."""
    if status not in STATUSES:
        raise ValidationError(f"Unknown quarantine status {status!r}; expected one of {', '.join(STATUSES)}")
    with transaction.atomic(using=memproc_db()):
        row = models.Message.objects.select_for_update().get(pk=message.pk)
        content = dict(row.content or {})
        metadata = dict(content.get("metadata") or {})
        flag = dict(metadata.get("quarantine") or {"channel": "admin", "processor": "operator"})
        was_active = flag.get("status") in models.QUARANTINE_ACTIVE
        flag.update(
            status=status,
            reviewed_by=getattr(reviewer, "get_username", lambda: "")() if reviewer is not None else "",
            reviewed_at=timezone.now().isoformat(timespec="seconds"),
            note=note,
        )
        metadata["quarantine"] = flag
        content["metadata"] = metadata
        models.Message.objects.filter(pk=row.pk).update(content=content)
        active = status in models.QUARANTINE_ACTIVE
        if active and not was_active:
            models.MessageEmbedding.objects.filter(message_id=row.pk).delete()
            forget_cached([row.resource_id], using=memproc_db())
            # A summary folded before the flag may repeat what the message said: it is refolded.
            summaries_forget([(row.pk, row.thread_id, row.sequence)])
        elif was_active and not active and row.role in ("user", "assistant"):
            background.enqueue("memproc.embed_messages", kwargs={"message_ids": [row.pk]})
    return models.Message.objects.get(pk=row.pk)


def quarantine_flag(message: models.Message) -> dict[str, Any] | None:
    """The message's flag, or None."""
    flag = ((message.content or {}).get("metadata") or {}).get("quarantine")
    return flag if isinstance(flag, dict) else None
