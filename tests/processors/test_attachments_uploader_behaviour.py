"""AttachmentUploader without a database: which files it takes, what it stores (once per content),
what the model then sees in their place, how it refuses, and its options' errors."""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import pytest

from memproc.exceptions import ConfigurationError, TripWire
from memproc.messages import AttachmentRef, FilePart, Message, TextPart
from memproc.processors import AttachmentUploader
from memproc.processors.attachment_types import CheckedFile, StagedAttachment
from memproc.processors.base import ProcessorContext
from memproc.processors.store import InMemoryStore
from memproc.processors.turn import Turn

PDF = b"%PDF-1.4\n1 0 obj <<>> endobj\ntrailer <<>>\n%%EOF\n"
GIF = b"GIF89a" + bytes(10)


class RecordingStore:
    """An AttachmentStore that keeps what it was asked to stage, in order."""

    def __init__(self) -> None:
        self.staged: list[tuple[str, CheckedFile]] = []

    def stage(self, *, resource_id: str, file: CheckedFile) -> StagedAttachment:
        self.staged.append((resource_id, file))
        return StagedAttachment(
            id=f"att-{len(self.staged)}",
            resource_id=resource_id,
            name=file.name,
            content_type=file.content_type,
            size=file.size,
            sha256=file.sha256,
            created=True,
        )


def ctx_for(*messages: Message, loaded: tuple[Message, ...] = (), **kwargs: Any) -> ProcessorContext:
    return ProcessorContext(
        processor_id="attachment-uploader",
        messages=(*loaded, *messages),
        resource_id=kwargs.pop("resource_id", "user-1"),
        loaded_ids=frozenset(m.id for m in loaded),
        **kwargs,
    )


def pdf_part(name: str = "r.pdf", data: bytes = PDF) -> FilePart:
    return FilePart(data=base64.b64encode(data).decode(), media_type="application/pdf", name=name)


# --- what it replaces ------------------------------------------------------------------------------


def test_each_new_inline_file_becomes_a_reference_in_place():
    store = RecordingStore()
    first = Message.create(
        "user", [TextPart("a"), pdf_part("one.pdf"), TextPart("b"), FilePart(data=GIF, name="g")]
    )
    plain = Message.create("assistant", "no files")
    last = Message.create(
        "user", [FilePart(url="https://example.com/x.png"), FilePart(data=b"hello", name="h.txt")]
    )
    result = AttachmentUploader(storage=store, content_types=None).process_input(ctx_for(first, plain, last))
    assert result[0].parts == (
        TextPart("a"),
        AttachmentRef("att-1", "one.pdf", "application/pdf", len(PDF)),
        TextPart("b"),
        AttachmentRef("att-2", "g", "image/gif", len(GIF)),
    )
    assert result[1] is plain
    assert result[2].parts == (
        FilePart(url="https://example.com/x.png"),
        AttachmentRef("att-3", "h.txt", "text/plain", 5),
    )
    assert [m.id for m in result] == [first.id, plain.id, last.id]
    assert [(r, f.data) for r, f in store.staged] == [("user-1", PDF), ("user-1", GIF), ("user-1", b"hello")]


def test_the_reference_carries_the_checked_name_and_type():
    store = RecordingStore()
    message = Message.create("user", [FilePart(data=PDF, media_type="", name="../secret/report.pdf")])
    (result,) = AttachmentUploader(storage=store, content_types=None).process_input(ctx_for(message))
    assert result.parts == (AttachmentRef("att-1", "report.pdf", "application/pdf", len(PDF)),)
    ((_, file),) = store.staged
    assert file == CheckedFile(PDF, "application/pdf", "report.pdf", hashlib.sha256(PDF).hexdigest())


def test_the_same_content_is_stored_once_and_referenced_twice():
    store = RecordingStore()
    one = Message.create("user", [pdf_part("a.pdf"), pdf_part("b.pdf")])
    two = Message.create("user", [pdf_part("c.pdf", PDF + b"% other\n")])
    ctx = ctx_for(one, two)
    result = AttachmentUploader(storage=store, content_types=None).process_input(ctx)
    assert [p.attachment_id for p in result[0].parts] == ["att-1", "att-1"]
    assert [p.name for p in result[0].parts] == ["a.pdf", "b.pdf"]
    assert [p.attachment_id for p in result[1].parts] == ["att-2"]
    assert len(store.staged) == 2
    assert [s.id for s in ctx.state["staged"]] == ["att-1", "att-2"]


def test_messages_loaded_from_memory_are_left_alone():
    store = RecordingStore()
    old = Message.create("user", [pdf_part("old.pdf")])
    new = Message.create("user", "just words")
    assert AttachmentUploader(storage=store).process_input(ctx_for(new, loaded=(old,))) is None
    assert store.staged == []


def test_no_inline_file_means_no_change():
    message = Message.create("user", [TextPart("hi"), FilePart(url="https://example.com/a.pdf")])
    assert AttachmentUploader(storage=RecordingStore()).process_input(ctx_for(message)) is None


def test_the_resource_id_goes_to_the_store_and_none_is_empty():
    store = RecordingStore()
    AttachmentUploader(storage=store).process_input(
        ctx_for(Message.create("user", [pdf_part()]), resource_id=None)
    )
    assert [r for r, _ in store.staged] == [""]


def test_in_a_turn_the_staged_files_are_the_turns():
    store = RecordingStore()
    turn = Turn(agent=None, thread_id="t1", resource_id="user-1", store=None, input_messages=[])
    ctx = ctx_for(Message.create("user", [pdf_part()]), turn=turn)
    AttachmentUploader(storage=store).process_input(ctx)
    assert [s.id for s in turn.attachments] == ["att-1"]
    assert "staged" not in ctx.state


def test_without_storage_it_uses_the_memory_stores():
    store = RecordingStore()
    ctx = ctx_for(Message.create("user", [pdf_part()]), store=InMemoryStore(attachments=store))
    (result,) = AttachmentUploader().process_input(ctx)
    assert result.parts == (AttachmentRef("att-1", "r.pdf", "application/pdf", len(PDF)),)


def test_without_storage_or_memory_it_says_what_it_needs():
    with pytest.raises(ConfigurationError) as caught:
        AttachmentUploader().process_input(ctx_for(Message.create("user", [pdf_part()])))
    assert str(caught.value) == "AttachmentUploader needs storage=... outside a turn with memory"


# --- refusals ----------------------------------------------------------------------------------------


def test_a_refused_file_aborts_before_any_file_is_stored():
    store = RecordingStore()
    good = Message.create("user", [pdf_part("good.pdf")])
    bad = Message.create("user", [FilePart(data=b"not an image", media_type="image/png", name="bad.png")])
    with pytest.raises(TripWire) as caught:
        AttachmentUploader(storage=store).process_input(ctx_for(good, bad))
    assert str(caught.value) == "Attachment 'bad.png' is declared as image/png but its content is not"
    assert caught.value.processor_id == "attachment-uploader"
    assert caught.value.metadata == {
        "code": "type_not_allowed",
        "name": "bad.png",
        "size": 12,
        "limit": 10 * 1024 * 1024,
        "content_type": "image/png",
        "detected": None,
    }
    assert store.staged == []


def test_the_limits_come_from_the_options_else_the_settings(settings):
    settings.MEMPROC = {
        **settings.MEMPROC,
        "MAX_ATTACHMENT_BYTES": 7,
        "ATTACHMENT_CONTENT_TYPES": ["text/csv"],
    }
    assert AttachmentUploader().limits() == (7, ("text/csv",))
    assert AttachmentUploader(max_bytes=3, content_types=["image/*"]).limits() == (3, ("image/*",))
    settings.MEMPROC = {**settings.MEMPROC, "ATTACHMENT_CONTENT_TYPES": None}
    assert AttachmentUploader().limits() == (7, None)
    assert AttachmentUploader(content_types=iter(["text/plain"])).content_types == ("text/plain",)


def test_the_limits_apply(settings):
    settings.MEMPROC = {**settings.MEMPROC, "MAX_ATTACHMENT_BYTES": len(PDF) - 1}
    with pytest.raises(TripWire) as caught:
        AttachmentUploader(storage=RecordingStore()).process_input(
            ctx_for(Message.create("user", [pdf_part()]))
        )
    assert caught.value.metadata["code"] == "too_large"
    uploader = AttachmentUploader(storage=RecordingStore(), content_types=["image/*"])
    with pytest.raises(TripWire) as caught:
        uploader.process_input(
            ctx_for(Message.create("user", [FilePart(data=GIF + bytes(len(PDF)), name="g")]))
        )
    assert caught.value.metadata["code"] == "too_large"
    assert caught.value.metadata["limit"] == len(PDF) - 1
    uploader = AttachmentUploader(storage=RecordingStore(), max_bytes=len(PDF), content_types=["image/*"])
    with pytest.raises(TripWire) as caught:
        uploader.process_input(ctx_for(Message.create("user", [pdf_part()])))
    assert caught.value.metadata["code"] == "type_not_allowed"


# --- options ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("max_bytes", [0, -1, True, False, 1.5, "10"])
def test_max_bytes_must_be_a_positive_integer(max_bytes):
    with pytest.raises(ConfigurationError) as caught:
        AttachmentUploader(max_bytes=max_bytes)
    assert str(caught.value) == "AttachmentUploader(max_bytes=...) must be a positive integer"


def test_the_smallest_limit_is_one_byte():
    assert AttachmentUploader(max_bytes=1).limits()[0] == 1


def test_content_types_must_be_a_list():
    with pytest.raises(ConfigurationError) as caught:
        AttachmentUploader(content_types="image/png")
    assert str(caught.value) == "AttachmentUploader(content_types=...) must be a list of types"


class NotCallableStage:
    stage = "not a method"


@pytest.mark.parametrize("storage", [object(), NotCallableStage()])
def test_storage_must_have_a_stage_method(storage):
    with pytest.raises(ConfigurationError) as caught:
        AttachmentUploader(storage=storage)
    assert str(caught.value) == (
        "AttachmentUploader(storage=...) must be an AttachmentStore (with a stage() method); "
        'to change the Django storage, set MEMPROC["ATTACHMENT_STORAGE"]'
    )


def test_the_processor_id():
    assert AttachmentUploader.id == "attachment-uploader"
