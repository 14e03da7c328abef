"""Everything stored about one resource, by kind: what a purge deletes and an export holds."""

from __future__ import annotations

from typing import Any

from django.db.models import Q, QuerySet

from memproc import models


def resource_rows(*, resource_id: str) -> dict[str, QuerySet[Any]]:
    """Everything stored about one resource, by kind: what a purge deletes and an export holds.

    Rows are found by the resource's id and also through its threads (a revision, turn record or
    tripwire log names a thread; a message or attachment may carry a stale resource id).
    """
    thread_keys = models.Thread.objects.filter(resource_id=resource_id).values("id")
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
