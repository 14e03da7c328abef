"""Archiving threads in the admin: the list filter, and the archive / unarchive actions, which need
`memproc.change_thread`."""

from __future__ import annotations

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

from memproc import models
from memproc.services.threads import thread_archive
from tests.factories import ResourceFactory, ThreadFactory

pytestmark = pytest.mark.django_db

CHANGELIST = "admin:memproc_thread_changelist"


@pytest.fixture
def threads(db) -> tuple[models.Thread, models.Thread]:
    resource = ResourceFactory(id="user-7")
    kept = ThreadFactory(public_id="kept-thread", resource=resource, title="Kept")
    old = ThreadFactory(public_id="old-thread", resource=resource, title="Put away")
    thread_archive(thread=old)
    return kept, old


def staff_client(*codenames: str) -> Client:
    user = get_user_model().objects.create_user("operator", password="x", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    client = Client()
    client.force_login(user)
    return client


def test_the_list_filters_archived_threads(admin_client, threads):
    kept, old = threads
    page = admin_client.get(reverse(CHANGELIST), {"archived": "yes"}).content.decode()
    assert "Put away" in page and "Kept" not in page
    page = admin_client.get(reverse(CHANGELIST), {"archived": "no"}).content.decode()
    assert "Kept" in page and "Put away" not in page
    page = admin_client.get(reverse(CHANGELIST)).content.decode()
    assert "Kept" in page and "Put away" in page and "Not archived" in page


def test_the_actions_archive_and_unarchive(admin_client, threads):
    kept, old = threads
    url = reverse(CHANGELIST)
    done = admin_client.post(
        url, {"action": "archive_threads", ACTION_CHECKBOX_NAME: [kept.pk, old.pk]}, follow=True
    )
    assert "1 thread archived." in done.content.decode()  # the archived one keeps its time
    kept.refresh_from_db()
    assert kept.archived_at is not None
    done = admin_client.post(
        url, {"action": "unarchive_threads", ACTION_CHECKBOX_NAME: [old.pk]}, follow=True
    )
    assert "1 thread unarchived." in done.content.decode()
    old.refresh_from_db()
    assert old.archived_at is None


def test_the_change_page_shows_when_a_thread_was_archived(admin_client, threads):
    _kept, old = threads
    page = admin_client.get(reverse("admin:memproc_thread_change", args=[old.pk])).content.decode()
    assert "Archived at" in page


def test_the_actions_need_change_thread(threads):
    kept, _old = threads
    viewer = staff_client("view_thread")
    page = viewer.get(reverse(CHANGELIST)).content.decode()
    assert "archive_threads" not in page
    response = viewer.post(
        reverse(CHANGELIST), {"action": "archive_threads", ACTION_CHECKBOX_NAME: [kept.pk]}
    )
    kept.refresh_from_db()
    assert kept.archived_at is None and response.status_code in (200, 302, 403)


def test_staff_with_change_thread_archive(threads):
    kept, _old = threads
    editor = staff_client("view_thread", "change_thread")
    assert "archive_threads" in editor.get(reverse(CHANGELIST)).content.decode()
    editor.post(reverse(CHANGELIST), {"action": "archive_threads", ACTION_CHECKBOX_NAME: [kept.pk]})
    kept.refresh_from_db()
    assert kept.archived_at is not None
