"""Who may see memproc's admin, and what can never be added or edited by hand."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from memproc import models
from memproc.models import thread_key

pytestmark = pytest.mark.django_db

SUPPORT_CHAT = thread_key("user-42", "support-chat")  # the fixture thread's pk


@pytest.fixture
def non_staff_client(client):
    client.force_login(get_user_model().objects.create_user("customer", password="pw"))
    return client


def test_non_staff_users_are_sent_to_the_login_page(non_staff_client, conversation):
    urls = [
        reverse("admin:app_list", args=["memproc"]),
        reverse("admin:memproc_thread_changelist"),
        reverse("admin:memproc_thread_change", args=[SUPPORT_CHAT]),
        reverse("admin:memproc_tripwirelog_changelist"),
        reverse("admin:memproc_tripwirelog_review", args=[conversation.pending.pk]),
        reverse("admin:memproc_attachment_change", args=[conversation.image_attachment.pk]),
    ]
    for url in urls:
        response = non_staff_client.get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith(reverse("admin:login")), url


@pytest.mark.parametrize(
    "model", ["tripwirelog", "message", "attachment", "messageembedding", "workingmemoryrevision", "thread"]
)
def test_machine_written_rows_cannot_be_added(admin_client, model):
    assert admin_client.get(reverse(f"admin:memproc_{model}_add")).status_code == 403


def test_messages_cannot_be_edited(admin_client, conversation):
    message = conversation.messages[0]
    url = reverse("admin:memproc_message_change", args=[message.pk])
    page = admin_client.get(url).content.decode()
    assert 'name="_save"' not in page and "<textarea" not in page
    response = admin_client.post(url, {"role": "assistant", "text": "rewritten", "content": "{}"})
    assert response.status_code == 403
    message.refresh_from_db()
    assert message.role == "user" and message.text == "Where is my order number 0?"


def test_tripwire_logs_cannot_be_edited(admin_client, conversation):
    url = reverse("admin:memproc_tripwirelog_change", args=[conversation.pending.pk])
    response = admin_client.post(url, {"reason": "edited", "status": "confirmed"})
    assert response.status_code == 403
    conversation.pending.refresh_from_db()
    assert conversation.pending.reason == "Message contains a card number"


def test_deleting_a_thread_goes_through_the_service_and_removes_files(
    admin_client, conversation, django_capture_on_commit_callbacks
):
    storage = conversation.text_attachment.file.storage
    name = conversation.text_attachment.file.name
    assert storage.exists(name)
    url = reverse("admin:memproc_thread_delete", args=[SUPPORT_CHAT])
    with django_capture_on_commit_callbacks(execute=True):
        response = admin_client.post(url, {"post": "yes"})
    assert response.status_code == 302
    assert not models.Thread.objects.filter(public_id="support-chat").exists()
    assert not models.Attachment.objects.filter(pk=conversation.text_attachment.pk).exists()
    assert not storage.exists(name)


def test_delete_pages_count_instead_of_loading_every_row(admin_client, conversation):
    page = admin_client.get(reverse("admin:memproc_thread_delete", args=[SUPPORT_CHAT])).content.decode()
    assert "Messages: 200" in page or "messages: 200" in page.lower()
    page = admin_client.get(reverse("admin:memproc_resource_delete", args=["user-42"])).content.decode()
    assert "tripwire logs: 2" in page.lower() and "working memory revisions: 3" in page.lower()


def test_deleting_a_resource_purges_everything_it_owns(
    admin_client, conversation, django_capture_on_commit_callbacks
):
    storage = conversation.image_attachment.file.storage
    name = conversation.image_attachment.file.name
    with django_capture_on_commit_callbacks(execute=True):
        response = admin_client.post(
            reverse("admin:memproc_resource_delete", args=["user-42"]), {"post": "yes"}
        )
    assert response.status_code == 302
    assert not models.Resource.objects.filter(pk="user-42").exists()
    assert not models.TripwireLog.objects.filter(resource_id="user-42").exists()
    assert not models.WorkingMemoryRevision.objects.filter(key="user-42").exists()
    assert not storage.exists(name)
