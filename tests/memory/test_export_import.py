"""Memory.export and the import that reads it back: the versioned document, the round trip through a
purge (JSON and zip), idempotence, conflicts, embeddings rebuilt, and the two management commands."""

from __future__ import annotations

import io
import json
import zipfile

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from memproc import Memory
from memproc.exceptions import ValidationError
from memproc.messages import AttachmentRef, Message, TextPart
from memproc.models import (
    Attachment,
    MessageEmbedding,
    Resource,
    Thread,
    ThreadSummary,
    TripwireLog,
    TurnRecord,
    WorkingMemoryRevision,
    thread_key,
)
from memproc.models import Message as MessageRow
from memproc.services.attachments import attachment_store
from memproc.services.export import (
    VOLATILE,
    ImportConflict,
    archive_read,
    resource_export_chunks,
    resource_export_zip,
    resource_import,
)
from memproc.services.purge import resource_purge
from tests.factories import TripwireLogFactory, UserFactory

pytestmark = pytest.mark.django_db
R = "exported"


def stable(document: dict) -> dict:
    """The document without what VOLATILE names: the export time and the attachments' URLs."""
    assert VOLATILE == ("exported_at", "attachments[].url")
    kept = {k: v for k, v in document.items() if k != "exported_at"}
    kept["attachments"] = [{k: v for k, v in a.items() if k != "url"} for a in document["attachments"]]
    return kept


@pytest.fixture
def stored(make_agent, model, committing):
    """Two threads of turns (recall on: embedded), working memory of both scopes with revisions by a
    user, a reviewed tripwire log, a file referenced by a message, and another resource's data."""
    reviewer = UserFactory(username="reviewer")
    memory = Memory(semantic_recall={"top_k": 2}, working_memory={"scope": "resource"})
    agent = make_agent(id="exporter", memory=memory)
    for thread_id, text in (("plans", "Plan a trip to Porto"), ("recipes", "A soup with leeks")):
        model.add(f"Sure: {text.lower()}")
        agent.generate(text, thread_id=thread_id, resource_id=R)
        Thread.objects.filter(pk=thread_key(R, thread_id)).update(
            metadata={"topic": thread_id}, title=thread_id.title()
        )
    memory.update_working_memory("# User\n- Name: Ana", resource_id=R, actor=reviewer, source="api")
    Thread.objects.filter(pk=thread_key(R, "plans")).update(
        working_memory="- likes trains", working_memory_version=1
    )
    file = attachment_store(
        resource_id=R, data=b"itinerary bytes", name="plan.txt", content_type="text/plain"
    )
    ref = AttachmentRef(str(file.pk), "plan.txt", "text/plain", file.size)
    with committing():
        memory.save_messages(
            [Message.create("user", (TextPart("my itinerary"), ref), id="with-file")],
            thread_id="plans",
            resource_id=R,
        )
    TripwireLogFactory(
        resource_id=R, thread_id="plans", status="confirmed", reviewed_by=reviewer, reviewed_at=timezone.now()
    )
    ThreadSummary.objects.create(
        thread_id=thread_key(R, "plans"),
        text="Ana plans a trip to Porto by train.",
        covered_sequence=2,
        token_count=9,
    )
    model.add("other answer")
    agent.generate("someone else's secret", thread_id="others", resource_id="another")
    return memory


def test_the_document_is_versioned_and_holds_the_resource_only(stored):
    document = stored.export(resource_id=R)
    assert (document["format"], document["version"]) == ("memproc.export", 1)
    assert set(document) == {
        "format",
        "version",
        "exported_at",
        "resource",
        "threads",
        "working_memory_revisions",
        "turn_records",
        "tripwire_logs",
        "pending_tool_calls",
        "attachments",
    }
    assert document["resource"]["working_memory"] == "# User\n- Name: Ana"
    plans, recipes = document["threads"]
    assert (plans["id"], recipes["id"]) == ("plans", "recipes")
    assert [m["text"] for m in plans["messages"]] == [
        "Plan a trip to Porto",
        "Sure: plan a trip to porto",
        "my itinerary",
    ]
    assert [m["sequence"] for m in plans["messages"]] == [1, 2, 3]
    assert plans["metadata"] == {"topic": "plans"} and plans["working_memory"] == "- likes trains"
    assert len(document["turn_records"]) == 2
    assert [r["actor"] for r in document["working_memory_revisions"]] == ["reviewer"]
    assert document["tripwire_logs"][0]["reviewed_by"] == "reviewer"
    [attachment] = document["attachments"]
    assert attachment["message_id"] == "with-file" and attachment["url"].startswith("/media/attachments/")
    text = json.dumps(document)
    assert "someone else's secret" not in text and "embedding" not in text and '"vector"' not in text


def test_nothing_stored_is_a_lookup_error():
    with pytest.raises(LookupError):
        Memory().export(resource_id="nobody")
    with pytest.raises(LookupError):
        resource_export_chunks(resource_id="nobody")


def test_the_streamed_text_is_the_same_document(stored):
    streamed = json.loads("".join(resource_export_chunks(resource_id=R)))
    assert stable(streamed) == stable(stored.export(resource_id=R))


def test_export_purge_import_export_gives_the_same_document(stored, committing):
    before = stored.export(resource_id=R)
    archive = io.BytesIO()
    assert resource_export_zip(resource_id=R, target=archive) == {"attachments": 1, "missing": 0}
    file = Attachment.objects.get().file
    with committing():
        resource_purge(resource_id=R)
    assert not Resource.objects.filter(pk=R).exists() and not file.storage.exists(file.name)
    archive.seek(0)
    document, files = archive_read(archive)
    with committing():
        report = resource_import(document=document, files=files)
    assert report.created == {
        "resource": 1,
        "threads": 2,
        "messages": 5,
        "attachments": 1,
        "working_memory_revisions": 1,
        "turn_records": 2,
        "tripwire_logs": 1,
        "pending_tool_calls": 0,
    }
    assert report.missing_files == [] and report.unknown_users == []
    assert stable(stored.export(resource_id=R)) == stable(before)
    summaries = {t["id"]: t["summary"] for t in before["threads"]}
    assert summaries == {
        "plans": {"text": "Ana plans a trip to Porto by train.", "covered_sequence": 2, "token_count": 9},
        "recipes": None,
    }
    assert ThreadSummary.objects.get(thread_id=thread_key(R, "plans")).covered_sequence == 2
    restored = Attachment.objects.get()
    assert restored.file.read() == b"itinerary bytes"
    assert TurnRecord.objects.filter(resource_id=R).count() == 2
    assert WorkingMemoryRevision.objects.get(key=R).actor.username == "reviewer"


def test_embeddings_are_rebuilt_after_the_import(stored, committing):
    document = stored.export(resource_id=R)
    resource_purge(resource_id=R)
    assert not MessageEmbedding.objects.filter(resource_id=R).exists()
    with committing():
        report = resource_import(document=document)
        assert not MessageEmbedding.objects.filter(resource_id=R).exists()  # after commit, not before
    assert report.embedding_jobs == 1
    embedded = set(
        MessageEmbedding.objects.filter(resource_id=R).values_list("message__public_id", flat=True)
    )
    assert embedded == set(MessageRow.objects.filter(resource_id=R).values_list("public_id", flat=True))
    found = stored.recall(thread_id="recipes", resource_id=R, query="a soup with leeks", last_messages=0)
    assert "A soup with leeks" in [m.text for m in found]


def test_a_json_import_without_the_files_reports_them(stored, committing):
    document = stored.export(resource_id=R)
    with committing():
        resource_purge(resource_id=R)
    with committing():
        report = resource_import(document=document)
    assert report.missing_files == [document["attachments"][0]["id"]]
    after = stored.export(resource_id=R)
    assert after["attachments"] == []
    assert stable({**after, "attachments": []}) == stable({**document, "attachments": []})


def test_a_json_import_uses_files_still_in_the_storage(stored):
    document = stored.export(resource_id=R)
    Attachment.objects.all().delete()  # the row goes; the file stays in the storage
    report = resource_import(document=document)
    assert report.created["attachments"] == 1 and report.missing_files == []
    assert Attachment.objects.get().message.public_id == "with-file"


def test_a_file_named_by_the_document_is_used_only_if_its_bytes_match(stored):
    document = stored.export(resource_id=R)
    other = attachment_store(
        resource_id="another", data=b"another's file", name="x.txt", content_type="text/plain"
    )
    Attachment.objects.filter(resource_id=R).delete()
    document["attachments"][0]["file"] = other.file.name  # forged: another resource's file
    report = resource_import(document=document)
    assert report.missing_files == [document["attachments"][0]["id"]]
    assert not Attachment.objects.filter(resource_id=R).exists()


def test_importing_twice_changes_nothing(stored):
    document = stored.export(resource_id=R)
    counts = {
        model: model.objects.count() for model in (Thread, MessageRow, TurnRecord, TripwireLog, Attachment)
    }
    report = resource_import(document=document)
    assert set(report.created.values()) == {0}
    assert report.existing["messages"] == 5 and report.existing["threads"] == 2
    assert {model: model.objects.count() for model in counts} == counts


def test_an_existing_resource_keeps_its_working_memory(stored):
    document = stored.export(resource_id=R)
    stored.update_working_memory("# User\n- Name: Bea", resource_id=R)
    resource_import(document=document)
    assert stored.get_working_memory(resource_id=R) == "# User\n- Name: Bea"


def test_new_messages_join_an_existing_thread(stored, committing):
    document = stored.export(resource_id=R)
    MessageRow.objects.filter(public_id="with-file").delete()
    report = resource_import(document=document)
    assert report.created["messages"] == 1
    with committing():
        stored.save_messages([Message.create("user", "next")], thread_id="plans", resource_id=R)
    assert MessageRow.objects.get(text="next").sequence == 4  # the counter moved past the import


def test_conflicts_are_listed_and_nothing_is_imported(stored):
    document = stored.export(resource_id=R)
    resource_purge(resource_id=R)
    Memory().create_thread(resource_id=R, thread_id="elsewhere")  # a thread the document does not hold
    taken = document["threads"][1]["messages"][0]["id"]
    for sequence, message_id in enumerate((taken, "squatter"), start=1):
        MessageRow.objects.create(
            public_id=message_id, thread_id=thread_key(R, "elsewhere"), resource_id=R, sequence=sequence
        )
    document["threads"][0]["messages"][0]["id"] = "squatter"
    with pytest.raises(ImportConflict) as caught:
        resource_import(document=document)
    assert caught.value.conflicts == [
        "message 'squatter' is stored in another thread here",
        f"message {taken!r} is stored in another thread here",
    ]
    assert list(Thread.objects.filter(resource_id=R).values_list("public_id", flat=True)) == ["elsewhere"]
    assert not Thread.objects.filter(public_id="recipes").exists()


def test_another_resources_messages_of_the_same_ids_are_no_conflict(stored):
    """Message ids are per resource: an intruder holding the exported ids blocks nothing, learns
    nothing, and keeps its own messages."""
    document = stored.export(resource_id=R)
    resource_purge(resource_id=R)
    Memory().create_thread(resource_id="intruder", thread_id="plans")
    taken = document["threads"][1]["messages"][0]["id"]
    MessageRow.objects.create(
        public_id=taken, thread_id=thread_key("intruder", "plans"), resource_id="intruder", sequence=1
    )
    report = resource_import(document=document, embed=False)
    assert report.created["messages"] == sum(len(t["messages"]) for t in document["threads"])
    holders = MessageRow.objects.filter(public_id=taken).values_list("resource_id", flat=True)
    assert sorted(holders) == sorted(["intruder", R])


def test_a_message_stored_with_other_text_is_a_conflict(stored):
    document = stored.export(resource_id=R)
    first = document["threads"][0]["messages"][0]["id"]
    MessageRow.objects.filter(public_id=first).update(text="edited since")
    with pytest.raises(ImportConflict, match="another role or text"):
        resource_import(document=document)


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"format": "something"}, "Not a memproc export"),
        ({"version": 2}, "version 2"),
        ({"resource": None}, "resource: expected an object"),
        ({"threads": [{"id": "x", "messages": [{"id": "m", "role": "robot"}]}]}, r"threads\[0\]"),
        ({"turn_records": [{"id": "not-a-uuid"}]}, r"turn_records\[0\]\.id"),
    ],
)
def test_a_bad_document_is_refused_with_the_place_named(stored, change, error):
    document = {**stored.export(resource_id=R), **change}
    with pytest.raises(ValidationError, match=error):
        resource_import(document=document)


def test_a_tampered_file_is_refused(stored, committing):
    archive = io.BytesIO()
    resource_export_zip(resource_id=R, target=archive)
    document, _ = archive_read(io.BytesIO(archive.getvalue()))
    with committing():
        resource_purge(resource_id=R)
    with pytest.raises(ValidationError, match="sha256"):
        resource_import(document=document, files=lambda attachment_id: b"other bytes")
    assert not Attachment.objects.exists() and not Resource.objects.filter(pk=R).exists()


# --- the commands -------------------------------------------------------------------------------------


def test_the_export_command_prints_the_document(stored, capsys):
    call_command("memproc_export", "--resource", R)
    printed = json.loads(capsys.readouterr().out)
    assert stable(printed) == stable(stored.export(resource_id=R))


def test_the_export_command_writes_a_zip_with_the_files(stored, tmp_path):
    target = tmp_path / "out.zip"
    call_command("memproc_export", "--resource", R, "--with-files", str(target))
    with zipfile.ZipFile(target) as archive:
        names = archive.namelist()
        document = json.loads(archive.read("export.json"))
        assert archive.read(f"files/{document['attachments'][0]['id']}") == b"itinerary bytes"
    assert sorted(names) == ["export.json", f"files/{document['attachments'][0]['id']}"]


def test_the_export_command_refuses_an_unknown_resource():
    with pytest.raises(CommandError, match="Nothing is stored"):
        call_command("memproc_export", "--resource", "nobody")


def test_the_import_command_reads_a_zip_back(stored, tmp_path, capsys, committing):
    target = tmp_path / "out.zip"
    call_command("memproc_export", "--resource", R, "--with-files", str(target))
    before = stored.export(resource_id=R)
    with committing():
        resource_purge(resource_id=R)
    with committing():
        call_command("memproc_import", str(target))
    out = capsys.readouterr().out
    assert "messages: 5 new, 0 already stored" in out and "Done." in out
    assert stable(stored.export(resource_id=R)) == stable(before)
    call_command("memproc_import", str(target))
    assert "messages: 0 new, 5 already stored" in capsys.readouterr().out


def test_the_import_command_lists_conflicts(stored, tmp_path, capsys):
    document = stored.export(resource_id=R)
    target = tmp_path / "out.json"
    target.write_text(json.dumps(document))
    resource_purge(resource_id=R)
    taken = document["threads"][1]["messages"][0]["id"]
    Memory().create_thread(resource_id=R, thread_id="elsewhere")
    MessageRow.objects.create(
        public_id=taken, thread_id=thread_key(R, "elsewhere"), resource_id=R, sequence=1
    )
    with pytest.raises(CommandError, match="1 conflict"):
        call_command("memproc_import", str(target))
    assert f"message {taken!r} is stored in another thread here" in capsys.readouterr().err


def test_the_import_command_refuses_what_is_not_an_export(tmp_path):
    target = tmp_path / "junk.json"
    target.write_text("[1, 2]")
    with pytest.raises(CommandError, match="Not a memproc export"):
        call_command("memproc_import", str(target))
    with pytest.raises(CommandError):
        call_command("memproc_import", str(tmp_path / "missing.json"))


def test_the_import_command_reads_stdin(stored, monkeypatch, capsys, committing):
    document = json.dumps(stored.export(resource_id=R)).encode()
    with committing():
        resource_purge(resource_id=R)

    class Stdin:
        buffer = io.BytesIO(document)

    monkeypatch.setattr("sys.stdin", Stdin)
    call_command("memproc_import", "-", "--no-embed")
    assert "threads: 2 new" in capsys.readouterr().out
    assert Thread.objects.filter(resource_id=R).count() == 2
    assert not MessageEmbedding.objects.filter(resource_id=R).exists()
