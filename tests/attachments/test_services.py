"""The checks and services the API uses, and the processor on its own (no database)."""

from __future__ import annotations

import base64

import pytest

from memproc.exceptions import AttachmentError, ConfigurationError, TripWire
from memproc.messages import AttachmentRef, FilePart, Message, TextPart
from memproc.models import Attachment
from memproc.processors.attachment_checks import file_check, inline_file, sniff_content_type, type_allowed
from memproc.processors.attachment_types import InlineFile, StagedAttachment
from memproc.processors.attachments import AttachmentUploader
from memproc.processors.base import ProcessorContext
from memproc.services.attachments import (
    attachment_body_limit,
    attachment_check_size,
    attachment_store,
    attachment_url,
    messages_without_file_data,
)
from tests.attachments.conftest import PDF, R, data_uri, png, stored_files

MB = 1024 * 1024


# --- the API's size check -------------------------------------------------------------------------


def test_check_size_refuses_a_body_that_cannot_fit(settings):
    settings.MEMPROC = {**settings.MEMPROC, "MAX_ATTACHMENT_BYTES": 3 * MB}
    limit = attachment_body_limit()
    assert limit == 4 * MB + 1 * MB  # base64 of the largest file, plus the envelope allowance
    attachment_check_size(content_length=limit)
    attachment_check_size(content_length=str(limit))
    for missing in (None, "", "garbage"):
        attachment_check_size(content_length=missing)
    with pytest.raises(AttachmentError) as caught:
        attachment_check_size(content_length=limit + 1)
    assert caught.value.code == "too_large"
    assert caught.value.metadata == {"size": limit + 1, "limit": limit}
    assert isinstance(caught.value, ValueError)


# --- checks ---------------------------------------------------------------------------------------


def check(
    data, media_type="image/png", *, max_bytes=MB, allowed=("image/*", "application/pdf", "text/plain")
):
    file = inline_file(FilePart(data=data, media_type=media_type, name="f"))
    return file_check(file, max_bytes=max_bytes, content_types=allowed)


def test_size_estimate_is_exact_for_padded_base64():
    for n in range(0, 20):
        encoded = base64.b64encode(bytes(n)).decode()
        assert InlineFile(encoded, "base64", "", "").estimated_size == n


def test_data_uri_forms():
    assert check("data:text/plain,hello%20world", "text/plain").data == b"hello world"
    assert check("data:text/plain;charset=utf-8;base64,aGk=", "application/octet-stream").data == b"hi"
    jpeg = b"\xff\xd8\xff\xe0" + bytes(20)
    assert check(data_uri(jpeg, "image/jpg"), "image/png").content_type == "image/jpeg"  # the URI's type wins
    with pytest.raises(AttachmentError) as caught:
        check("data:image/png;base64", "image/png")
    assert caught.value.code == "undecodable"


def test_a_file_url_with_a_data_uri_counts_as_inline():
    assert inline_file(FilePart(url=data_uri(png()))) is not None
    assert inline_file(FilePart(url="https://example.com/x.png")) is None


@pytest.mark.parametrize(
    "data, expected",
    [
        (png(), "image/png"),
        (b"\xff\xd8\xff\xe0" + bytes(20), "image/jpeg"),
        (b"GIF89a" + bytes(10), "image/gif"),
        (b"RIFF\x00\x00\x00\x00WEBPVP8 ", "image/webp"),
        (b"\x00\x00\x00\x1cftypavif" + bytes(8), "image/avif"),
        (PDF, "application/pdf"),
        (b"\n \xef\xbb\xbf%PDF-1.7", "application/pdf"),
        (b"just some text about %PDF- headers", None),
    ],
)
def test_sniffing(data, expected):
    assert sniff_content_type(data) == expected


def test_a_generic_type_takes_the_sniffed_one():
    assert check(png(), "application/octet-stream").content_type == "image/png"
    assert check(PDF, "").content_type == "application/pdf"
    with pytest.raises(AttachmentError) as caught:
        check(b"plain words", "image/*")
    assert caught.value.code == "type_not_allowed"
    with pytest.raises(AttachmentError):  # unknown bytes stay octet-stream, which the list refuses
        check(b"\x00\x01\x02", "application/octet-stream")


def test_a_generic_type_with_text_content_takes_the_names_text_type():
    file = inline_file(FilePart(data=b"a,b\n1,2\n", name="table.csv"))
    assert file_check(file, max_bytes=MB, content_types=["text/csv"]).content_type == "text/csv"
    file = inline_file(FilePart(data=b"\x00\x01binary", name="table.csv"))
    with pytest.raises(AttachmentError):  # not text: stays octet-stream, which the list refuses
        file_check(file, max_bytes=MB, content_types=["text/csv"])


def test_a_declared_image_must_look_like_one():
    with pytest.raises(AttachmentError) as caught:
        check(b"not a png", "image/png")
    assert "declared as image/png but its content is not" in str(caught.value)
    assert check(b"\x00\x00" + bytes(30), "image/tiff").content_type == "image/tiff"  # not sniffable


def test_allow_list_patterns():
    assert (
        type_allowed("image/png", ["image/*"]) and type_allowed("x/y", ["*/*"]) and type_allowed("x/y", None)
    )
    assert not type_allowed("image/png", []) and not type_allowed("text/html", ["text/plain"])
    assert type_allowed("image/jpeg", ["IMAGE/JPG"])


def test_an_empty_allow_list_refuses_everything_and_none_allows_all():
    with pytest.raises(AttachmentError):
        check(png(), allowed=())
    assert (
        check(b"MZ\x90", "application/x-msdownload", allowed=None).content_type == "application/x-msdownload"
    )


def test_names_are_made_safe():
    file = inline_file(FilePart(data=png(), media_type="image/png", name="../../etc/passwd"))
    assert file_check(file, max_bytes=MB, content_types=None).name == "passwd"
    file = inline_file(FilePart(data=png(), media_type="image/png"))
    assert file_check(file, max_bytes=MB, content_types=None).name == "file.png"


def test_messages_without_file_data_drop_only_bytes():
    message = Message.create(
        "user",
        [
            TextPart("hi"),
            FilePart(data=png(), media_type="image/png", name="a.png"),
            FilePart(url=data_uri(png()), media_type="image/png"),
            FilePart(url="https://example.com/b.png", media_type="image/png"),
        ],
    )
    (stripped,) = messages_without_file_data([message])
    assert stripped.parts[0] == TextPart("hi")
    assert stripped.parts[1] == FilePart(media_type="image/png", name="a.png")
    assert stripped.parts[2] == FilePart(media_type="image/png")
    assert stripped.parts[3] == message.parts[3]
    plain = Message.create("user", "no files")
    assert messages_without_file_data([plain])[0] is plain


# --- the processor alone --------------------------------------------------------------------------


class MemoryStore:
    """An AttachmentStore in a dict, so the processor runs without a database."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}

    def stage(self, *, resource_id, file):
        self.files[file.sha256] = file.data
        return StagedAttachment(
            id=f"att-{file.sha256[:8]}",
            resource_id=resource_id,
            name=file.name,
            content_type=file.content_type,
            size=file.size,
            sha256=file.sha256,
            created=True,
        )


def test_the_processor_replaces_only_new_inline_files():
    store = MemoryStore()
    old = Message.create("user", [FilePart(data=png(rgb=(1, 2, 3)), media_type="image/png")])
    new = Message.create("user", [TextPart("look"), FilePart(data=data_uri(png()), name="p.png")])
    ctx = ProcessorContext(
        processor_id="attachment-uploader", messages=(old, new), resource_id=R, loaded_ids=frozenset({old.id})
    )
    result = AttachmentUploader(storage=store).process_input(ctx)
    assert result[0] is old  # loaded from memory: never re-uploaded
    assert result[1].parts[0] == TextPart("look")
    assert result[1].parts[1] == AttachmentRef(
        f"att-{list(store.files)[0][:8]}", "p.png", "image/png", len(png())
    )
    assert list(store.files.values()) == [png()]
    assert isinstance(new.parts[1], FilePart)  # the input is untouched
    assert [s.name for s in ctx.state["staged"]] == ["p.png"]


def test_the_processor_returns_none_without_inline_files():
    ctx = ProcessorContext(processor_id="attachment-uploader", messages=(Message.create("user", "hi"),))
    assert AttachmentUploader(storage=MemoryStore()).process_input(ctx) is None


def test_the_processor_aborts_with_code_and_metadata():
    ctx = ProcessorContext(
        processor_id="attachment-uploader",
        messages=(Message.create("user", [FilePart(data=PDF, media_type="application/pdf", name="r.pdf")]),),
    )
    store = MemoryStore()
    with pytest.raises(TripWire) as caught:
        AttachmentUploader(storage=store, content_types=["image/*"]).process_input(ctx)
    assert caught.value.metadata == {
        "code": "type_not_allowed",
        "name": "r.pdf",
        "size": len(PDF),
        "limit": 10 * MB,
        "content_type": "application/pdf",
        "allowed": ["image/*"],
    }
    assert store.files == {}


@pytest.mark.parametrize(
    "kwargs", [{"max_bytes": 0}, {"max_bytes": True}, {"content_types": "image/png"}, {"storage": object()}]
)
def test_options_are_validated(kwargs):
    with pytest.raises(ConfigurationError):
        AttachmentUploader(**kwargs)


# --- storing outside a turn -----------------------------------------------------------------------


@pytest.mark.django_db
def test_attachment_store_deduplicates_per_resource():
    first = attachment_store(resource_id=R, data=png(), name="a.png", content_type="image/png")
    again = attachment_store(resource_id=R, data=png(), name="b.png", content_type="image/png")
    assert first.pk == again.pk and first.message_id is None
    assert Attachment.objects.count() == 1 and stored_files() == [first.file.name]
    assert attachment_url(attachment=first) == f"/media/attachments/{first.file.name}"
    with pytest.raises(AttachmentError) as caught:
        attachment_store(resource_id=R, data=PDF, name="x.png", content_type="image/png")
    assert caught.value.code == "type_not_allowed" and Attachment.objects.count() == 1


@pytest.mark.django_db
def test_client_chosen_resource_ids_cannot_escape_the_storage():
    row = attachment_store(resource_id="../../etc", data=png(), name="a.png", content_type="image/png")
    assert row.resource_id == "../../etc"
    assert ".." not in row.file.name and row.file.name.startswith("memproc/_etc/")


@pytest.mark.django_db
def test_memory_save_messages_offloads_inline_files(committing):
    import base64

    from memproc import Memory
    from memproc.exceptions import AttachmentError
    from memproc.messages import FilePart, Message, TextPart
    from memproc.models import Attachment
    from memproc.models import Message as StoredMessage

    memory = Memory()
    data = base64.b64encode(b"plain notes").decode()
    message = Message.create(
        "user", (TextPart("see file"), FilePart(data=data, media_type="text/plain", name="n.txt"))
    )
    with committing():
        memory.save_messages([message], thread_id="t-files", resource_id="r-files")
    stored = StoredMessage.objects.get()
    assert [p["type"] for p in stored.content["parts"]] == ["text", "attachment"]
    assert Attachment.objects.get().message_id == stored.pk
    bad = Message.create("user", (FilePart(data="!!!not base64!!!", media_type="text/plain", name="x.txt"),))
    with pytest.raises(AttachmentError):
        memory.save_messages([bad], thread_id="t-files", resource_id="r-files")
    assert StoredMessage.objects.count() == 1 and Attachment.objects.count() == 1
