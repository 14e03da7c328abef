"""Files in generate requests: multipart uploads and data: URIs become attachment references."""

from __future__ import annotations

import base64

import pytest
from django.test import override_settings

from memproc import Agent, Memory
from memproc.agents import register, unregister
from memproc.models import Attachment, Message
from memproc.testing import ScriptedModel

pytestmark = pytest.mark.django_db
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)


@pytest.fixture
def uploader_agent():
    model = ScriptedModel(["Nice picture.", "Got it."])
    register(Agent(id="files", model=model, memory=Memory()), replace=True)
    yield model
    unregister("files")


@pytest.fixture
def owner(django_user_model):
    return django_user_model.objects.create_user("owner", password="pw")


def test_multipart_upload_is_stored_once_and_referenced(client, owner, uploader_agent):
    from django.core.files.uploadedfile import SimpleUploadedFile

    client.force_login(owner)
    response = client.post(
        "/api/memproc/agents/files/generate/",
        {
            "messages": "What is in this picture?",
            "thread_id": "pics",
            "files": [SimpleUploadedFile("dot.png", PNG, content_type="image/png")],
        },
    )
    assert response.status_code == 200, response.content
    attachment = Attachment.objects.get()
    assert (attachment.name, attachment.content_type, attachment.size) == ("dot.png", "image/png", len(PNG))
    user = Message.objects.get(role="user")
    kinds = [p["type"] for p in user.content["parts"]]
    assert kinds == ["text", "attachment"] and "iVBOR" not in str(user.content)
    sent = uploader_agent.requests[0].messages[-1]
    assert any(getattr(p, "type", "") == "file" for p in sent.parts)  # resolved for the model


def test_data_uri_in_json_body_is_offloaded(client, owner, uploader_agent):
    client.force_login(owner)
    uri = "data:image/png;base64," + base64.b64encode(PNG).decode()
    body = {
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "look"},
                    {"type": "image_url", "image_url": {"url": uri}},
                ],
            }
        ]
    }
    response = client.post("/api/memproc/agents/files/generate/", body, content_type="application/json")
    assert response.status_code == 200, response.content
    assert Attachment.objects.count() == 1 and "base64" not in str(Message.objects.get(role="user").content)


@override_settings(MEMPROC={"EMBEDDER": "memproc.testing.HashEmbedder", "MAX_ATTACHMENT_BYTES": 1000})
def test_oversized_upload_answers_413_and_saves_nothing(client, owner, uploader_agent):
    from django.core.files.uploadedfile import SimpleUploadedFile

    client.force_login(owner)
    big = SimpleUploadedFile("big.txt", b"x" * 50_000, content_type="text/plain")
    response = client.post("/api/memproc/agents/files/generate/", {"messages": "read this", "files": [big]})
    assert response.status_code == 413
    assert not Message.objects.exists() and not Attachment.objects.exists() and uploader_agent.calls == 0


def test_refused_type_is_a_blocked_turn(client, owner, uploader_agent):
    from django.core.files.uploadedfile import SimpleUploadedFile

    client.force_login(owner)
    exe = SimpleUploadedFile("tool.exe", b"MZ\x90\x00", content_type="application/x-msdownload")
    response = client.post("/api/memproc/agents/files/generate/", {"messages": "run it", "files": [exe]})
    assert response.status_code == 200
    assert response.json()["tripwire"]["metadata"]["code"] == "type_not_allowed"
    assert not Message.objects.exists() and not Attachment.objects.exists()


@pytest.mark.parametrize(
    "fields, field",
    [
        ({"messages": "", "thread_id": "t"}, "messages"),
        ({"messages": "   "}, "messages"),
        ({"messages": "hi", "resource_id": ""}, "resource_id"),
        ({"messages": "hi", "thread_id": ""}, "thread_id"),
    ],
)
def test_an_empty_form_field_is_a_400_on_that_field(client, owner, uploader_agent, fields, field):
    """An empty field is refused, not taken as absent (the default resource, a new thread)."""
    client.force_login(owner)
    response = client.post("/api/memproc/agents/files/generate/", fields)  # multipart, as a browser form
    assert response.status_code == 400, response.content
    assert field in response.json()
    assert not Message.objects.exists() and uploader_agent.calls == 0
