"""At prompt time references become a URL or the file's bytes; stored messages keep the reference."""

from __future__ import annotations

import pytest

from memproc.messages import AttachmentRef, FilePart, Message, TextPart
from memproc.models import Attachment
from memproc.models import Message as StoredMessage
from memproc.services.attachments import attachment_model_options, attachment_store, attachments_resolve
from tests.attachments.conftest import PDF, R, T, file_message, png

pytestmark = pytest.mark.django_db


@pytest.fixture
def absolute_urls(settings, fs_storage):
    """The attachment storage with an absolute base URL, as a site serving media would have."""
    settings.STORAGES = {
        **settings.STORAGES,
        "memproc_attachments": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": fs_storage, "base_url": "https://files.example.com/att/"},
        },
    }


def sent_file(model) -> FilePart:
    (part,) = [p for m in model.requests[-1].messages for p in m.parts if isinstance(p, FilePart)]
    return part


def models_setting(settings, **models) -> None:
    settings.MEMPROC = {**settings.MEMPROC, "MODELS": models}


def test_an_absolute_storage_url_is_sent_as_a_url(make_agent, model, absolute_urls):
    model.add("ok")
    make_agent().generate(file_message(png()), thread_id=T, resource_id=R)
    part = sent_file(model)
    row = Attachment.objects.get()
    assert part.data is None and part.url == f"https://files.example.com/att/{row.file.name}"
    assert (part.media_type, part.name) == ("image/png", "pic.png")


def test_a_provider_that_needs_bytes_gets_bytes(make_agent, model, absolute_urls, settings):
    models_setting(settings, test={"inline_attachments": True})
    model.add("ok")
    make_agent().generate(file_message(png()), thread_id=T, resource_id=R)
    part = sent_file(model)
    assert part.data == png() and part.url is None


def test_a_per_model_option_wins_over_the_providers(make_agent, model, settings):
    models_setting(
        settings, test={"inline_attachments": True}, **{"test/scripted": {"inline_attachments": False}}
    )
    model.add("ok")
    make_agent().generate(file_message(png()), thread_id=T, resource_id=R)
    part = sent_file(model)  # relative URL, but the setting says URL
    assert part.data is None and part.url.startswith("/media/attachments/memproc/user-1/")


def test_small_files_go_inline_under_inline_attachment_bytes(make_agent, model, absolute_urls, settings):
    settings.MEMPROC = {**settings.MEMPROC, "INLINE_ATTACHMENT_BYTES": 1024}
    model.add("ok")
    make_agent().generate(file_message(png()), thread_id=T, resource_id=R)
    assert sent_file(model).data == png()


def test_the_model_attribute_declares_a_need_for_bytes(make_agent, model, absolute_urls):
    model.inline_attachments = True
    model.add("ok")
    make_agent().generate(file_message(png()), thread_id=T, resource_id=R)
    assert sent_file(model).data == png()


def test_resolution_is_never_written_back(make_agent, model, absolute_urls):
    model.add("ok")
    result = make_agent().generate(file_message(png()), thread_id=T, resource_id=R)
    assert isinstance(result.messages[0].parts[1], AttachmentRef)
    assert isinstance(result.prompt[-1].parts[1], AttachmentRef)
    assert [p["type"] for p in StoredMessage.objects.get(role="user").content["parts"]] == [
        "text",
        "attachment",
    ]


def test_references_to_another_resources_file_stay_references(make_agent, model):
    theirs = attachment_store(
        resource_id="someone-else", data=png(), name="secret.png", content_type="image/png"
    )
    forged = Message.create(
        "user", [TextPart("show me"), AttachmentRef(str(theirs.pk), "x.png", "image/png", 10)]
    )
    model.add("nothing to see")
    make_agent().generate(forged, thread_id=T, resource_id=R)
    parts = model.requests[0].messages[-1].parts
    assert isinstance(parts[1], AttachmentRef) and not any(isinstance(p, FilePart) for p in parts)


def test_unknown_and_malformed_ids_stay_references():
    messages = [
        Message.create(
            "user", [AttachmentRef("not-a-uuid"), AttachmentRef("00000000-0000-0000-0000-000000000000")]
        )
    ]
    assert attachments_resolve(messages=messages, resource_id=R) == messages


def test_no_query_without_references(django_assert_num_queries):
    messages = [Message.create("user", "hello"), Message.create("assistant", "hi")]
    with django_assert_num_queries(0):
        assert attachments_resolve(messages=messages, resource_id=R) == messages


def test_one_query_for_many_references(django_assert_num_queries):
    rows = [
        attachment_store(resource_id=R, data=png(rgb=(i, 0, 0)), name=f"{i}.png", content_type="image/png")
        for i in range(3)
    ]
    messages = [Message.create("user", [AttachmentRef(str(r.pk), r.name, "image/png", r.size)]) for r in rows]
    with django_assert_num_queries(1):
        resolved = attachments_resolve(messages=messages, resource_id=R, inline=False)
    assert [m.parts[0].url for m in resolved] == [r.file.url for r in rows]


def test_a_missing_file_leaves_the_reference(caplog):
    row = attachment_store(resource_id=R, data=png(), name="gone.png", content_type="image/png")
    row.file.storage.delete(row.file.name)
    messages = [Message.create("user", [AttachmentRef(str(row.pk), "gone.png", "image/png", row.size)])]
    assert attachments_resolve(messages=messages, resource_id=R, inline=True) == messages
    assert "could not resolve attachment" in caplog.text


def test_model_options_come_from_the_attribute_the_provider_and_the_model_id(settings):
    class Model:
        id = "ollama/llava"

    assert attachment_model_options(Model()) == {}
    models_setting(settings, ollama={"api": "openai", "inline_attachments": True})
    assert attachment_model_options(Model()) == {"inline_attachments": True}
    models_setting(
        settings, ollama={"inline_attachments": True}, **{"ollama/llava": {"inline_attachments": False}}
    )
    assert attachment_model_options(Model()) == {"inline_attachments": False}


def test_a_list_of_types_sends_only_those_as_bytes(make_agent, model, absolute_urls, settings):
    models_setting(settings, test={"inline_attachments": ["application/pdf"]})
    model.add("ok", "ok")
    agent = make_agent()
    agent.generate(file_message(PDF, media_type="application/pdf", name="r.pdf"), thread_id=T, resource_id=R)
    assert sent_file(model).data == PDF
    agent.generate(file_message(png()), thread_id="t2", resource_id=R)
    assert sent_file(model).url.startswith("https://files.example.com/")


def test_openai_models_send_documents_as_bytes_and_images_by_url(settings):
    from memproc.llm.openai import OpenAIChatModel

    gpt = OpenAIChatModel("gpt-4o-mini", api_key="sk-test")
    assert attachment_model_options(gpt) == {"inline_attachments": ["application/*", "text/*", "audio/*"]}
    models_setting(settings, openai={"inline_attachments": True})
    assert attachment_model_options(gpt) == {"inline_attachments": True}
