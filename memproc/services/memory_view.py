"""The end-user memory view's writes: pinning a working-memory field, and excluding a message from
recall (or letting it back in). A correction of a field is a working-memory update
(`working_memory_update(field=..., source="user")`).

Forgetting is `memproc.services.forget` (a separate service); the memory view's forget endpoint
calls it.
"""

from __future__ import annotations

from django.db import transaction

from memproc import background, models
from memproc.db import memproc_db
from memproc.exceptions import ValidationError
from memproc.models import message_key
from memproc.selectors.threads import pinned_names
from memproc.vectors import forget_cached

__all__ = ["message_recall_exclude", "resource_field_pin"]

MAX_PINNED_FIELDS = 200


def resource_field_pin(*, resource_id: str, name: str, pinned: bool) -> tuple[str, ...]:
    """Pins (or unpins) field `name` of the resource's working memory; returns the pinned names.
    The model's updates keep a pinned field's value. Idempotent; pinning creates the resource row if
    the user has none yet (a field of the template can be pinned before anything is remembered)."""
    if not name or len(name) > 255:
        raise ValidationError("A field name is 1 to 255 characters")
    alias = memproc_db()
    with transaction.atomic(using=alias):
        if pinned:
            rows = [models.Resource(pk=resource_id)]
            models.Resource.objects.using(alias).bulk_create(rows, ignore_conflicts=True)
        resource = models.Resource.objects.using(alias).select_for_update().filter(pk=resource_id).first()
        if resource is None:
            return ()  # nothing stored, nothing pinned
        names = list(pinned_names(resource.pinned_fields))
        if pinned and name not in names:
            if len(names) >= MAX_PINNED_FIELDS:
                raise ValidationError(f"At most {MAX_PINNED_FIELDS} fields can be pinned")
            names.append(name)
        elif not pinned and name in names:
            names.remove(name)
        else:
            return tuple(names)
        models.Resource.objects.using(alias).filter(pk=resource_id).update(pinned_fields=names)
    return tuple(names)


def message_recall_exclude(*, resource_id: str, message_id: str, excluded: bool) -> models.Message:
    """Keeps the resource's message out of semantic recall (`excluded`), or lets it back in; history
    still shows it. Excluding deletes its embeddings (recall's SQL skips it in any case, whatever a
    vector store holds); including it again embeds it after commit. Idempotent. An unknown id is
    `Message.DoesNotExist`."""
    alias = memproc_db()
    with transaction.atomic(using=alias):
        row = (
            models.Message.objects.using(alias)
            .select_for_update()
            .get(pk=message_key(resource_id, message_id))
        )
        if row.recall_excluded == excluded:
            return row
        models.Message.objects.using(alias).filter(pk=row.pk).update(recall_excluded=excluded)
        if excluded:
            models.MessageEmbedding.objects.using(alias).filter(message_id=row.pk).delete()
            forget_cached([row.resource_id], using=alias)
        elif row.role in ("user", "assistant") and not row.quarantined:
            background.enqueue("memproc.embed_messages", kwargs={"message_ids": [row.pk]})
    row.recall_excluded = excluded
    return row
