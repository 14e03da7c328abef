"""Links from memproc's rows to the site's users, cleared when a user is deleted.

The links carry no database constraint and Django's delete collector does not follow them (see
USER_LINK in memproc.models): a site may keep memproc's tables in a database of their own, which
neither reaches. This receiver does what `on_delete=SET_NULL` did, in memproc's database, once the
user's deletion commits (a deletion that rolls back leaves the links as they were).
"""

from __future__ import annotations

from functools import partial
from typing import Any

from django.db import transaction

from memproc import models
from memproc.db import memproc_db

# (model, field) of every link to a user.
USER_LINKS = (
    (models.WorkingMemoryRevision, "actor"),
    (models.SummaryRevision, "actor"),
    (models.TripwireLog, "reviewed_by"),
    (models.ForgetReceipt, "actor"),
    (models.PendingToolCall, "decided_by"),
)


def user_links_clear(*, user_pk: Any) -> int:
    """Clears every link to the user `user_pk`; returns how many rows it changed."""
    using = memproc_db()
    return sum(
        model.objects.using(using).filter(**{f"{field}_id": user_pk}).update(**{field: None})
        for model, field in USER_LINKS
    )


def user_deleted(sender: Any, instance: Any, using: str, **kwargs: Any) -> None:
    """`post_delete` receiver of the user model."""
    transaction.on_commit(partial(user_links_clear, user_pk=instance.pk), using=using)
