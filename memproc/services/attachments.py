"""Writes of attachments: files offloaded to the attachment storage, referenced from messages."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from django.db import transaction
from django.db.models import TextField
from django.db.models.functions import Cast

from memproc import models

logger = logging.getLogger(__name__)


def attachments_release(*, message_ids: Sequence[str]) -> int:
    """Deletes the attachments of messages about to be deleted, unless another message references them.

    A deduplicated file may be referenced by several messages of its resource; the reference lives in
    the message's content JSON, so other references are found with a text match on the id.
    Files are removed from storage after the transaction commits, never before.
    """
    if not message_ids:
        return 0
    released = 0
    for attachment in models.Attachment.objects.filter(message_id__in=list(message_ids)):
        still_used = (
            models.Message.objects.filter(resource_id=attachment.resource_id)
            .exclude(id__in=list(message_ids))
            .annotate(content_text=Cast("content", TextField()))
            .filter(content_text__contains=str(attachment.id))
            .values_list("id", flat=True)
            .first()
        )
        if still_used:
            models.Attachment.objects.filter(pk=attachment.pk).update(message_id=still_used)
            continue
        attachment_delete(attachment=attachment)
        released += 1
    return released


def attachment_delete(*, attachment: models.Attachment) -> None:
    name, storage = attachment.file.name, attachment.file.storage
    attachment.delete()

    def remove_file() -> None:
        try:
            storage.delete(name)
        except Exception:  # a missing file must not fail a delete
            logger.warning("memproc: could not delete attachment file %s", name, exc_info=True)

    transaction.on_commit(remove_file)
