"""Client-sent files never run as pages of the site (finding 3 of the third hostile review: a file sent
as `data:text/plain` named `notes.html` ran as HTML, with the operator's session, when it was opened
from the admin)."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

from memproc import models
from tests.api.conftest import API, client_for
from tests.factories import UserFactory

SCRIPT = b"<html><script>fetch('/api/memproc/threads/').then(r => r.text()).then(alert)</script></html>"
GENERATE = API + "agents/api-test/generate/"


def send_file(client: Any, name: str, content_type: str, data: bytes) -> models.Attachment:
    uri = f"data:{content_type};base64," + base64.b64encode(data).decode()
    body = {
        "thread_id": "files",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "keep this"},
                    {"type": "file", "data": uri, "media_type": content_type, "name": name},
                ],
            }
        ],
    }
    response = client.post(GENERATE, body, format="json")
    assert response.status_code == 200, response.content
    return models.Attachment.objects.get(name=name)


def assert_download(response: Any, *, content_type: str, data: bytes) -> None:
    assert response.status_code == 200
    assert response["Content-Type"] == content_type
    assert response["Content-Disposition"].startswith("attachment;")
    assert response["X-Content-Type-Options"] == "nosniff"
    assert "sandbox" in response["Content-Security-Policy"]
    assert response.content == data


@pytest.mark.django_db
def test_an_html_file_sent_as_text_is_stored_under_a_server_name_and_served_as_a_text_download(
    owner_client, agent, model, resource
):
    model.add("noted")
    attachment = send_file(owner_client, "notes.html", "text/plain", SCRIPT)
    assert attachment.name == "notes.html"  # shown as the client named it
    assert not attachment.file.name.endswith(".html") and attachment.file.name.endswith(".txt")
    assert "notes" not in attachment.file.name

    url = owner_client.get(f"{API}attachments/{attachment.pk}/").json()["url"]
    assert url.endswith(f"/attachments/{attachment.pk}/download/")
    assert_download(owner_client.get(url), content_type="text/plain", data=SCRIPT)


@pytest.mark.django_db
def test_a_type_that_is_not_safe_to_show_is_served_as_opaque_bytes(
    owner_client, agent, model, resource, settings
):
    settings.MEMPROC = {**getattr(settings, "MEMPROC", {}), "ATTACHMENT_CONTENT_TYPES": None}
    model.add("noted")
    svg = b'<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>'
    attachment = send_file(owner_client, "logo.svg", "image/svg+xml", svg)
    assert attachment.file.name.endswith(".bin")
    response = owner_client.get(f"{API}attachments/{attachment.pk}/download/")
    assert_download(response, content_type="application/octet-stream", data=svg)


@pytest.mark.django_db
def test_operators_open_files_from_the_admin_as_downloads(owner_client, agent, model, resource):
    model.add("noted")
    attachment = send_file(owner_client, "notes.html", "text/plain", SCRIPT)
    download = reverse("admin:memproc_attachment_download", args=[attachment.pk])

    operator = UserFactory(is_staff=True)
    operator.user_permissions.add(Permission.objects.get(codename="view_attachment"))
    browser = Client()
    browser.force_login(operator)
    page = browser.get(reverse("admin:memproc_attachment_change", args=[attachment.pk])).content.decode()
    assert download in page and attachment.file.url not in page
    assert_download(browser.get(download), content_type="text/plain", data=SCRIPT)

    staff_without_permission = UserFactory(is_staff=True)
    browser.force_login(staff_without_permission)
    assert browser.get(download).status_code == 403


@pytest.mark.django_db
def test_another_users_file_is_a_404_through_the_api(owner_client, agent, model, resource):
    model.add("noted")
    attachment = send_file(owner_client, "notes.txt", "text/plain", b"mine")
    stranger = client_for(UserFactory())
    assert stranger.get(f"{API}attachments/{attachment.pk}/download/").status_code == 404
