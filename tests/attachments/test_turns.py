"""Files sent in a turn: offloaded to storage, referenced from the stored message, resolved for the model."""

from __future__ import annotations

import base64
import hashlib
import json

import pytest
from django.db.models import TextField
from django.db.models.functions import Cast, Length

from memproc import Memory
from memproc.exceptions import ModelUnavailableError
from memproc.messages import AttachmentRef, FilePart, Message, TextPart
from memproc.models import Attachment, Thread, TripwireLog
from memproc.models import Message as StoredMessage
from memproc.processors import AttachmentUploader
from tests.attachments.conftest import PDF, R, T, data_uri, file_message, png, stored_files

pytestmark = pytest.mark.django_db


def request_files(model, index: int = 0) -> list[FilePart]:
    return [p for m in model.requests[index].messages for p in m.parts if isinstance(p, FilePart)]


def stored_parts() -> list[dict]:
    return [
        p for content in StoredMessage.objects.values_list("content", flat=True) for p in content["parts"]
    ]


def test_a_data_uri_is_stored_once_and_the_message_keeps_a_reference(make_agent, model):
    image = png()
    model.add("a red square")
    result = make_agent().generate(
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "what is this?"},
                {"type": "image_url", "image_url": {"url": data_uri(image)}},
            ],
        },
        thread_id=T,
        resource_id=R,
    )
    assert result.tripwire is None and result.text == "a red square"
    row = Attachment.objects.get()
    assert (row.resource_id, row.content_type, row.size) == (R, "image/png", len(image))
    assert row.sha256 == hashlib.sha256(image).hexdigest()
    assert row.message.public_id == result.messages[0].id
    with row.file.open("rb") as handle:
        assert handle.read() == image
    ref = result.messages[0].parts[1]
    assert isinstance(ref, AttachmentRef) and ref.attachment_id == str(row.pk)
    # The stored message holds the reference and no bytes.
    user = StoredMessage.objects.get(role="user")
    assert user.content["parts"][1] == {
        "type": "attachment",
        "attachment_id": str(row.pk),
        "name": "file.png",
        "media_type": "image/png",
        "size": len(image),
    }
    assert base64.b64encode(image).decode()[:40] not in json.dumps(user.content)
    # The model got the file itself (the test storage's URL is relative, so as bytes).
    (sent,) = request_files(model)
    assert sent.data == image and sent.media_type == "image/png" and sent.url is None


@pytest.mark.parametrize(
    "data",
    [base64.b64encode(PDF).decode("ascii"), PDF, data_uri(PDF, "application/pdf")],
    ids=["base64", "bytes", "data-uri"],
)
def test_every_inline_form_of_a_file_part_is_offloaded(make_agent, model, data):
    model.add("a pdf")
    result = make_agent().generate(
        file_message(data, media_type="application/pdf", name="report.pdf"), thread_id=T, resource_id=R
    )
    assert result.tripwire is None
    row = Attachment.objects.get()
    assert (row.name, row.content_type, row.size) == ("report.pdf", "application/pdf", len(PDF))
    assert [p["type"] for p in stored_parts() if p["type"] != "text"] == ["attachment"]
    assert request_files(model)[0].data == PDF


def test_a_message_stored_after_a_5_mb_image_is_under_2_kb(make_agent, model):
    image = png() + bytes(range(256)) * (5 * 1024 * 4)  # a PNG header and 5 MB of payload
    assert len(image) > 5 * 1024 * 1024
    model.add("big picture")
    make_agent().generate(file_message(data_uri(image)), thread_id=T, resource_id=R)
    size = (
        StoredMessage.objects.filter(role="user")
        .annotate(n=Length(Cast("content", TextField())))
        .values_list("n", flat=True)
        .get()
    )
    assert size < 2048
    assert Attachment.objects.get().size == len(image)


def test_the_same_file_twice_is_one_row_and_one_file(make_agent, model):
    image = png()
    agent = make_agent()
    model.add("first", "second")
    agent.generate(file_message(data_uri(image), name="a.png"), thread_id=T, resource_id=R)
    agent.generate(file_message(base64.b64encode(image).decode(), name="b.png"), thread_id=T, resource_id=R)
    row = Attachment.objects.get()
    assert len(stored_files()) == 1
    refs = [p for p in stored_parts() if p["type"] == "attachment"]
    assert [r["attachment_id"] for r in refs] == [str(row.pk)] * 2
    assert [r["name"] for r in refs] == ["a.png", "b.png"]  # each message keeps the name it was sent with
    assert row.message.text == "look" and row.message.created_at < StoredMessage.objects.last().created_at


def test_the_same_file_twice_in_one_message_is_stored_once(make_agent, model):
    image = png()
    model.add("twins")
    message = Message.create(
        "user",
        [
            FilePart(data=image, media_type="image/png"),
            FilePart(data=data_uri(image), media_type="image/png"),
        ],
    )
    make_agent().generate(message, thread_id=T, resource_id=R)
    row = Attachment.objects.get()
    assert [p.get("attachment_id") for p in stored_parts()][:2] == [str(row.pk)] * 2
    assert len(stored_files()) == 1


def test_the_same_file_from_another_resource_is_stored_separately(make_agent, model):
    agent = make_agent()
    model.add("one", "two")
    agent.generate(file_message(png()), thread_id="ta", resource_id="alice")
    agent.generate(file_message(png()), thread_id="tb", resource_id="bob")
    assert sorted(Attachment.objects.values_list("resource_id", flat=True)) == ["alice", "bob"]
    assert len(stored_files()) == 2


# --- refusals: tripwire set, nothing saved --------------------------------------------------------


def assert_nothing_saved(model, metadata: dict | None = None) -> None:
    assert model.calls == 0
    assert not StoredMessage.objects.exists()
    assert not Thread.objects.exists()
    assert not Attachment.objects.exists()
    assert stored_files() == []
    log = TripwireLog.objects.get()
    assert log.processor_id == "attachment-uploader" and log.phase == "input"
    if metadata is not None:
        assert log.metadata == metadata
    assert "base64" not in json.dumps(log.content) and log.content[0]["parts"][1]["data"] is None


REFUSALS = [
    pytest.param(
        {"MAX_ATTACHMENT_BYTES": 1000},
        data_uri(b"\x89PNG\r\n\x1a\n" + bytes(2000)),
        "image/png",
        "too_large",
        "is 2.0 KB; the limit is 1000 bytes",
        id="too-large",
    ),
    pytest.param(
        {},
        data_uri(b"MZ\x90\x00binary", "application/x-msdownload"),
        "application/x-msdownload",
        "type_not_allowed",
        "has type application/x-msdownload, which is not allowed",
        id="refused-type",
    ),
    pytest.param(
        {},
        data_uri(PDF, "image/png"),
        "image/png",
        "type_not_allowed",
        "is declared as image/png but its content is application/pdf",
        id="mislabeled",
    ),
    pytest.param(
        {},
        data_uri(b"\xff\xfe\x00\x01binary", "text/plain"),
        "text/plain",
        "type_not_allowed",
        "is declared as text/plain but its content is not UTF-8 text",
        id="binary-as-text",
    ),
    pytest.param(
        {},
        "data:image/png;base64,iVBORw0K$$$not-base64",
        "image/png",
        "undecodable",
        "could not be decoded",
        id="undecodable",
    ),
    pytest.param(
        {},
        "data:image/png;base64,iVBO Rw0K",
        "image/png",
        "undecodable",
        "could not be decoded",
        id="whitespace",
    ),
]


@pytest.mark.parametrize("options, data, media_type, code, reason", REFUSALS)
def test_a_refused_file_blocks_the_turn_and_nothing_is_saved(
    make_agent, model, settings, options, data, media_type, code, reason
):
    settings.MEMPROC = {**settings.MEMPROC, **options}
    result = make_agent().generate(file_message(data, media_type=media_type), thread_id=T, resource_id=R)
    tripwire = result.tripwire
    assert result.text == "" and result.messages == []
    assert tripwire.processor_id == "attachment-uploader" and tripwire.phase == "input"
    assert reason in tripwire.reason and "'pic.png'" in tripwire.reason
    assert tripwire.metadata["code"] == code
    assert tripwire.metadata["name"] == "pic.png"
    assert tripwire.metadata["limit"] == options.get("MAX_ATTACHMENT_BYTES", 10 * 1024 * 1024)
    assert isinstance(tripwire.metadata["size"], int) and tripwire.metadata["size"] > 0
    assert_nothing_saved(model, metadata=tripwire.metadata)


def test_size_is_refused_from_the_encoded_length_before_decoding(make_agent, model, settings, monkeypatch):
    settings.MEMPROC = {**settings.MEMPROC, "MAX_ATTACHMENT_BYTES": 3000}
    decoded = []
    monkeypatch.setattr(base64, "b64decode", lambda *a, **k: decoded.append(a) or b"")
    # 4004 base64 characters with "==" padding decode to 3001 bytes: one over.
    result = make_agent().generate(
        file_message("data:image/png;base64," + "A" * 4002 + "=="), thread_id=T, resource_id=R
    )
    assert result.tripwire.metadata == {
        "code": "too_large",
        "name": "pic.png",
        "size": 3001,
        "limit": 3000,
        "content_type": "image/png",
    }
    assert decoded == []
    assert_nothing_saved(model)


def test_a_refused_second_file_stores_neither(make_agent, model):
    message = Message.create(
        "user",
        [
            FilePart(data=png(), media_type="image/png", name="ok.png"),
            FilePart(data=b"MZ", media_type="application/x-msdownload", name="bad.exe"),
        ],
    )
    result = make_agent().generate(message, thread_id=T, resource_id=R)
    assert result.tripwire.metadata["name"] == "bad.exe"
    assert_nothing_saved(model)


# --- turns that end without saving ----------------------------------------------------------------


class Blocker:
    def __init__(self, pid: str = "blocker", *, on: str = "input") -> None:
        self.id = pid
        if on == "input":
            self.process_input = self._abort
        else:
            self.process_output_result = self._abort

    def _abort(self, ctx):
        # Output hooks get the input apart from the responses (ctx.input_messages).
        turn_messages = [*ctx.input_messages, *ctx.messages]
        assert any(isinstance(p, AttachmentRef) for m in turn_messages for p in m.parts)
        assert stored_files()  # the file is on storage while the turn runs
        ctx.abort("no thanks")


@pytest.mark.parametrize("phase", ["input", "output"])
def test_a_turn_blocked_after_the_upload_leaves_no_rows_or_files(make_agent, model, phase):
    blocker = Blocker(on=phase)
    agent = make_agent(**{f"{phase}_processors": [blocker]})
    model.add("answer")
    result = agent.generate(file_message(png()), thread_id=T, resource_id=R)
    assert result.tripwire.processor_id == "blocker" and result.tripwire.phase == phase
    assert not Attachment.objects.exists() and not StoredMessage.objects.exists()
    assert stored_files() == []


def test_a_failed_turn_leaves_no_rows_or_files(make_agent, model):
    model.add(ModelUnavailableError("provider down"))
    with pytest.raises(ModelUnavailableError):
        make_agent().generate(file_message(png()), thread_id=T, resource_id=R)
    assert not Attachment.objects.exists() and stored_files() == []


def test_an_abandoned_stream_leaves_no_rows_or_files(make_agent, model):
    model.add("a long answer in many words")
    events = make_agent().stream(file_message(png()), thread_id=T, resource_id=R)
    assert next(events).type == "text-delta"
    assert len(stored_files()) == 1
    events.close()
    assert not Attachment.objects.exists() and stored_files() == []


def test_a_blocked_turn_keeps_an_earlier_turns_file(make_agent, model):
    model.add("first")
    make_agent().generate(file_message(png()), thread_id=T, resource_id=R)
    blocked = make_agent(input_processors=[Blocker()])
    result = blocked.generate(file_message(png(), text="again"), thread_id=T, resource_id=R)
    assert result.tripwire is not None
    row = Attachment.objects.get()
    assert stored_files() == [row.file.name]


def test_a_file_a_later_processor_drops_is_deleted_after_commit(make_agent, model):
    class DropFiles:
        id = "drop-files"

        def process_input(self, ctx):
            return [
                m.replace(parts=tuple(p for p in m.parts if not isinstance(p, AttachmentRef)))
                for m in ctx.messages
            ]

    model.add("ok")
    result = make_agent(input_processors=[DropFiles()]).generate(
        file_message(png()), thread_id=T, resource_id=R
    )
    assert result.tripwire is None and StoredMessage.objects.count() == 2
    assert not Attachment.objects.exists() and stored_files() == []


def test_streaming_offloads_the_same_way(make_agent, model):
    model.add("streamed answer")
    events = list(make_agent().stream(file_message(png()), thread_id=T, resource_id=R))
    assert events[-1].type == "finish"
    row = Attachment.objects.get()
    assert stored_files() == [row.file.name] and row.message_id is not None


# --- history, placement, dedup by id --------------------------------------------------------------


def test_history_is_resolved_again_but_never_re_uploaded(make_agent, model, monkeypatch):
    from memproc.services.attachments import DjangoAttachmentStore

    staged = []
    original = DjangoAttachmentStore.stage
    monkeypatch.setattr(
        DjangoAttachmentStore, "stage", lambda self, **kw: staged.append(kw) or original(self, **kw)
    )
    agent = make_agent()
    model.add("first", "second")
    agent.generate(file_message(png()), thread_id=T, resource_id=R)
    agent.generate("and now?", thread_id=T, resource_id=R)
    assert len(staged) == 1
    assert [f.data for f in request_files(model, 1)] == [png()]  # the history's image, resolved again
    assert Attachment.objects.count() == 1 and len(stored_files()) == 1


def test_the_uploader_runs_first_and_a_placed_one_replaces_it(make_agent, model, settings):
    agent = make_agent(memory=Memory(last_messages=5, working_memory=True))
    assert [p.id for p in agent.processor_chains()[0]] == [
        "attachment-uploader",
        "working-memory",
        "message-history",
    ]
    strict = AttachmentUploader(max_bytes=10)
    agent = make_agent(input_processors=[strict])
    chain_in, chain_out = agent.processor_chains()
    assert chain_in == [agent.memory.processors()[0][1], strict] and "attachment-uploader" not in [
        p.id for p in chain_out
    ]
    result = agent.generate(file_message(png()), thread_id=T, resource_id=R)
    assert result.tripwire.metadata["code"] == "too_large" and result.tripwire.metadata["limit"] == 10


@pytest.mark.parametrize(
    "memory", [Memory(read_only=True), Memory(last_messages=False)], ids=["read-only", "no-history"]
)
def test_memory_that_saves_nothing_leaves_files_inline(make_agent, model, memory):
    model.add("seen")
    agent = make_agent(memory=memory)
    assert "attachment-uploader" not in [p.id for p in agent.processor_chains()[0]]
    agent.generate(file_message(png()), thread_id=T, resource_id=R)
    assert request_files(model)[0].data == png()
    assert not Attachment.objects.exists() and stored_files() == []


def test_remote_file_urls_are_left_alone(make_agent, model):
    model.add("remote")
    message = Message.create(
        "user", [TextPart("see"), FilePart(url="https://example.com/a.png", media_type="image/png")]
    )
    make_agent().generate(message, thread_id=T, resource_id=R)
    assert not Attachment.objects.exists()
    assert stored_parts()[1]["url"] == "https://example.com/a.png"
    assert request_files(model)[0].url == "https://example.com/a.png"


def test_a_concurrent_turn_that_stored_the_same_file_first_wins(make_agent, model):
    from memproc.services.attachments import attachment_store

    class ConcurrentWriter:
        """Stands in for another turn of the resource that commits the same bytes mid-turn."""

        id = "concurrent-writer"

        def process_input(self, ctx):
            self.winner = attachment_store(
                resource_id=R, data=png(), name="other.png", content_type="image/png"
            )

    writer = ConcurrentWriter()
    model.add("ok")
    result = make_agent(input_processors=[writer]).generate(file_message(png()), thread_id=T, resource_id=R)
    assert result.tripwire is None
    row = Attachment.objects.get()
    assert row.pk == writer.winner.pk and row.message.public_id == result.messages[0].id
    (ref,) = [p for p in stored_parts() if p["type"] == "attachment"]
    assert ref["attachment_id"] == str(row.pk)
    assert stored_files() == [row.file.name]  # this turn's own copy went after commit
