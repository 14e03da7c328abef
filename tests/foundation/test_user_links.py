"""Deleting a user clears memproc's links to them (who edited a memory or a summary, who reviewed a
blocked turn) and keeps the rows: what `on_delete=SET_NULL` did, now done by a receiver because the
links cross databases where a site routes memproc to its own (USER_LINK in memproc.models)."""

from __future__ import annotations

import pytest
from django.db import transaction

from memproc import models
from tests.factories import ThreadFactory, TripwireLogFactory, UserFactory

pytestmark = pytest.mark.django_db(databases="__all__")


def linked_rows(user):
    thread = ThreadFactory()
    memory = models.WorkingMemoryRevision.objects.create(
        scope="resource", key=thread.resource_id, new="likes tea", version=1, source="admin", actor=user
    )
    summary = models.SummaryRevision.objects.create(thread=thread, version=1, source="admin", actor=user)
    log = TripwireLogFactory(reviewed_by=user, status="confirmed")
    return memory, summary, log


def user_of(row):
    row.refresh_from_db()
    field = "reviewed_by_id" if isinstance(row, models.TripwireLog) else "actor_id"
    return getattr(row, field)


def test_deleting_a_user_clears_the_links_once_the_deletion_commits(django_capture_on_commit_callbacks):
    user, other = UserFactory(), UserFactory()
    rows = linked_rows(user)
    kept = linked_rows(other)
    with django_capture_on_commit_callbacks(execute=True):
        user.delete()
    assert [user_of(row) for row in rows] == [None, None, None]
    assert [user_of(row) for row in kept] == [other.pk] * 3  # nobody else's links


def test_a_deletion_that_rolls_back_leaves_the_links(django_capture_on_commit_callbacks):
    user = UserFactory()
    user_pk = user.pk  # delete() clears it on the instance, even when the transaction rolls back
    rows = linked_rows(user)
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        with pytest.raises(RuntimeError), transaction.atomic():
            user.delete()
            raise RuntimeError("the site's own delete failed")
    assert callbacks == []
    assert [user_of(row) for row in rows] == [user_pk] * 3


def test_a_row_whose_user_is_gone_reads_as_no_user():
    """A link left behind (a user deleted by raw SQL, before this receiver) must not break a page."""
    user = UserFactory()
    memory, _summary, log = linked_rows(user)
    models.WorkingMemoryRevision.objects.filter(pk=memory.pk).update(actor_id=user.pk + 1000)
    [row] = models.WorkingMemoryRevision.objects.filter(pk=memory.pk).prefetch_related("actor")
    assert row.actor is None
    [row] = models.TripwireLog.objects.filter(pk=log.pk).prefetch_related("reviewed_by")
    assert row.reviewed_by == user
