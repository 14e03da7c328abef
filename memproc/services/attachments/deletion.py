"""Deleting messages, threads and resources deletes the files no remaining message references."""

from __future__ import annotations

from collections.abc import Sequence

from django.db.models import TextField
from django.db.models.functions import Cast

from memproc import models
from memproc.db import memproc_atomic
from memproc.services.attachments.files import attachment_delete


def attachments_release(*, message_keys: Sequence[str]) -> int:
    """Deletes the attachments of messages about to be deleted (by their keys), unless another message
    references them.

    A deduplicated file may be referenced by several messages of its resource; the reference lives in
    the message's content JSON, so other references are found with a text match on the id.
    Files are removed from storage after the transaction commits, never before.
    """
    if not message_keys:
        return 0
    released = 0
    for attachment in models.Attachment.objects.filter(message_id__in=list(message_keys)):
        still_used = (
            models.Message.objects.filter(resource_id=attachment.resource_id)
            .exclude(id__in=list(message_keys))
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


@memproc_atomic
def attachments_delete(*, resource_id: str) -> int:
    """Deletes every attachment of a resource (rows now, files after commit): for deleting the
    resource, after which no message can reference them."""
    count = 0
    for attachment in models.Attachment.objects.filter(resource_id=resource_id):
        attachment_delete(attachment=attachment)
        count += 1
    return count
