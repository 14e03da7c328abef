"""Reviewing blocked turns: the actions' note page, the single review page, who and when."""

from __future__ import annotations

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.models import LogEntry
from django.urls import reverse

from memproc import models

pytestmark = pytest.mark.django_db

CHANGELIST = "admin:memproc_tripwirelog_changelist"


def test_mark_false_positive_asks_for_a_note_then_records_the_reviewer(
    admin_client, admin_user, conversation
):
    url = reverse(CHANGELIST)
    selected = [conversation.pending.pk, conversation.not_stored.pk]
    data = {"action": "mark_false_positive", ACTION_CHECKBOX_NAME: selected}

    page = admin_client.post(url, data)
    assert page.status_code == 200  # the intermediate page, nothing changed yet
    assert (
        'name="note"' in page.content.decode() and "Message contains a card number" in page.content.decode()
    )
    assert models.TripwireLog.objects.filter(status="pending").count() == 2

    done = admin_client.post(
        url, {**data, "post": "yes", "note": "Test card numbers are allowed"}, follow=True
    )
    assert "2 blocked turns marked false positive." in done.content.decode()
    for log in models.TripwireLog.objects.filter(pk__in=selected):
        assert log.status == "false_positive"
        assert log.note == "Test card numbers are allowed"
        assert log.reviewed_by == admin_user and log.reviewed_at is not None
    assert LogEntry.objects.filter(object_id=str(conversation.pending.pk)).exists()


def test_mark_confirmed_action(admin_client, admin_user, conversation):
    data = {
        "action": "mark_confirmed",
        ACTION_CHECKBOX_NAME: [conversation.pending.pk],
        "post": "yes",
        "note": "",
    }
    admin_client.post(reverse(CHANGELIST), data)
    conversation.pending.refresh_from_db()
    assert conversation.pending.status == "confirmed" and conversation.pending.reviewed_by == admin_user


def test_review_page_records_verdict_and_note(admin_client, admin_user, conversation):
    url = reverse("admin:memproc_tripwirelog_review", args=[conversation.not_stored.pk])
    response = admin_client.post(url, {"status": "confirmed", "note": "Really unsafe"})
    assert response.status_code == 302 and response["Location"] == reverse(CHANGELIST)
    log = models.TripwireLog.objects.get(pk=conversation.not_stored.pk)
    assert (log.status, log.note, log.reviewed_by) == ("confirmed", "Really unsafe", admin_user)
    page = admin_client.get(reverse("admin:memproc_tripwirelog_change", args=[log.pk])).content.decode()
    assert "Really unsafe" in page and admin_user.get_username() in page


def test_review_page_rejects_an_unknown_status(admin_client, conversation):
    url = reverse("admin:memproc_tripwirelog_review", args=[conversation.pending.pk])
    response = admin_client.post(url, {"status": "maybe", "note": ""})
    assert response.status_code == 200 and "errorlist" in response.content.decode()
    conversation.pending.refresh_from_db()
    assert conversation.pending.status == "pending"


def test_reopening_clears_the_review_time(admin_client, conversation):
    url = reverse("admin:memproc_tripwirelog_review", args=[conversation.pending.pk])
    admin_client.post(url, {"status": "confirmed", "note": ""})
    admin_client.post(url, {"status": "pending", "note": "Second look"})
    conversation.pending.refresh_from_db()
    assert conversation.pending.status == "pending" and conversation.pending.reviewed_at is None


def test_viewer_without_change_permission_cannot_review(client, conversation):
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission

    viewer = get_user_model().objects.create_user("viewer", password="pw", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_tripwirelog"))
    client.force_login(viewer)
    assert client.get(reverse(CHANGELIST)).status_code == 200
    review = reverse("admin:memproc_tripwirelog_review", args=[conversation.pending.pk])
    assert client.post(review, {"status": "confirmed"}).status_code == 403
    page = client.get(
        reverse("admin:memproc_tripwirelog_change", args=[conversation.pending.pk])
    ).content.decode()
    assert review not in page
    conversation.pending.refresh_from_db()
    assert conversation.pending.status == "pending"


def test_the_review_form_shows_what_was_blocked_escaped(admin_client, conversation):
    log = conversation.pending
    log.content = [
        {
            "id": "blocked-1",
            "role": "user",
            "parts": [{"type": "text", "text": "My card <script>alert(1)</script>"}],
        }
    ]
    log.metadata = {"message_id": "blocked-1", "spans": [[3, 7]]}
    log.save()
    page = admin_client.get(reverse("admin:memproc_tripwirelog_review", args=[log.pk])).content.decode()
    assert "What was blocked" in page
    assert "My card &lt;script&gt;alert(1)&lt;/script&gt;" in page and "<script>alert" not in page
    assert "<mark" in page  # the stretch the guardrail flagged


def test_the_review_form_says_when_the_blocked_content_was_not_stored(admin_client, conversation):
    url = reverse("admin:memproc_tripwirelog_review", args=[conversation.not_stored.pk])
    assert "Not stored" in admin_client.get(url).content.decode()
