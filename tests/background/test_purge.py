"""Purging a resource: a dry run changes nothing; a real purge deletes all of it and nothing of another."""

from __future__ import annotations

import hashlib
from io import StringIO

import pytest
from django.core.files.base import ContentFile
from django.core.management import call_command
from django.test import TestCase

from memproc import Memory, models
from memproc.services.purge import resource_purge
from tests.factories import TripwireLogFactory

pytestmark = pytest.mark.django_db
ALICE, BOB = "alice", "bob"


def attachment(resource_id: str, data: bytes, message: models.Message | None = None) -> models.Attachment:
    return models.Attachment.objects.create(
        resource_id=resource_id,
        message=message,
        file=ContentFile(data, name="note.txt"),
        name="note.txt",
        content_type="text/plain",
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
    )


def store_everything(make_agent, model, resource_id: str) -> dict[str, object]:
    """Two threads of turns (embedded), resource and thread working memory, attachments, tripwire logs."""
    agent = make_agent(id=f"agent-{resource_id}")
    for thread in ("one", "two"):
        model.add("noted")
        agent.generate(
            f"{resource_id} says hello in {thread}",
            thread_id=f"{resource_id}-{thread}",
            resource_id=resource_id,
        )
    Memory(working_memory=True).update_working_memory("# Notes\n- likes tea", resource_id=resource_id)
    Memory(working_memory={"scope": "thread"}).update_working_memory(
        "# Thread notes\n- about hello", thread_id=f"{resource_id}-one"
    )
    message = models.Message.objects.filter(resource_id=resource_id).first()
    files = [
        attachment(resource_id, f"{resource_id} linked".encode(), message),
        attachment(resource_id, f"{resource_id} not yet linked".encode()),
    ]
    TripwireLogFactory(resource_id=resource_id, thread_id=f"{resource_id}-one")
    TripwireLogFactory(resource_id="", thread_id=f"{resource_id}-two")  # logged before the resource was known
    return {"files": [f.file.name for f in files]}


def snapshot(resource_id: str) -> dict[str, int]:
    threads = [f"{resource_id}-one", f"{resource_id}-two"]
    return {
        "resource": models.Resource.objects.filter(pk=resource_id).count(),
        "threads": models.Thread.objects.filter(resource_id=resource_id).count(),
        "messages": models.Message.objects.filter(resource_id=resource_id).count(),
        "embeddings": models.MessageEmbedding.objects.filter(resource_id=resource_id).count(),
        "revisions": models.WorkingMemoryRevision.objects.filter(
            key__in=[resource_id, *(models.thread_key(resource_id, t) for t in threads)]
        ).count(),
        "attachments": models.Attachment.objects.filter(resource_id=resource_id).count(),
        "tripwires": models.TripwireLog.objects.filter(thread_id__in=threads).count(),
        "turn_records": models.TurnRecord.objects.filter(resource_id=resource_id).count(),
    }


EXPECTED = {
    "resource": 1,
    "threads": 2,
    "messages": 4,
    "embeddings": 4,
    "revisions": 2,
    "attachments": 2,
    "tripwires": 2,
    "turn_records": 2,
}


@pytest.fixture
def stored(make_agent, model):
    data = {ALICE: store_everything(make_agent, model, ALICE), BOB: store_everything(make_agent, model, BOB)}
    assert snapshot(ALICE) == snapshot(BOB) == EXPECTED
    return data


def storage():
    return models.Attachment._meta.get_field("file").storage


def test_a_dry_run_counts_and_changes_nothing(stored):
    counts = resource_purge(resource_id=ALICE, dry_run=True)
    assert counts.as_dict() == {
        "threads": 2,
        "messages": 4,
        "embeddings": 4,
        "working_memory_revisions": 2,
        "attachments": 2,
        "turn_records": 2,
        "tripwire_logs": 2,
        "idempotency_records": 0,
        "pending_tool_calls": 0,
        "resource": 1,
    }
    assert snapshot(ALICE) == EXPECTED
    assert all(storage().exists(name) for name in stored[ALICE]["files"])


def test_a_purge_deletes_everything_of_the_resource_and_nothing_of_another(stored):
    with TestCase.captureOnCommitCallbacks(execute=True):
        counts = resource_purge(resource_id=ALICE)

    assert counts.total == 19
    assert set(snapshot(ALICE).values()) == {0}
    assert not any(storage().exists(name) for name in stored[ALICE]["files"])
    assert snapshot(BOB) == EXPECTED
    assert all(storage().exists(name) for name in stored[BOB]["files"])


def test_files_are_deleted_only_after_the_commit(stored):
    with TestCase.captureOnCommitCallbacks(execute=False) as callbacks:
        resource_purge(resource_id=ALICE)
    assert all(storage().exists(name) for name in stored[ALICE]["files"])  # a rollback would keep them
    for callback in callbacks:
        callback()
    assert not any(storage().exists(name) for name in stored[ALICE]["files"])


def test_recall_of_the_other_resource_still_works_after_a_purge(stored, make_agent, model):
    resource_purge(resource_id=ALICE)
    model.add("yes")
    result = make_agent(id="agent-bob").generate("who says hello", thread_id="bob-three", resource_id=BOB)
    recalled = {m["thread_id"] for m in result.memory["recalled"]}
    assert recalled and recalled <= {"bob-one", "bob-two"}


def test_purging_a_resource_with_nothing_stored_is_a_no_op(stored):
    assert resource_purge(resource_id="nobody").total == 0
    assert snapshot(ALICE) == snapshot(BOB) == EXPECTED


def test_the_command_is_a_dry_run_by_default(stored):
    out = StringIO()
    call_command("memproc_purge", ALICE, stdout=out)
    text = out.getvalue()
    assert "Would delete for resource 'alice':" in text
    assert "       4  messages" in text
    assert "Dry run: nothing was deleted. Add --yes to delete." in text
    assert snapshot(ALICE) == EXPECTED


def test_the_command_deletes_with_yes(stored):
    out = StringIO()
    with TestCase.captureOnCommitCallbacks(execute=True):
        call_command("memproc_purge", ALICE, "--yes", stdout=out)
    assert "Deleted for resource 'alice':" in out.getvalue()
    assert set(snapshot(ALICE).values()) == {0}
    assert snapshot(BOB) == EXPECTED

    out = StringIO()
    call_command("memproc_purge", ALICE, "--yes", stdout=out)
    assert out.getvalue().strip() == "Nothing is stored for resource 'alice'."


def test_a_purge_deletes_the_resources_suspended_turns_and_no_others(make_agent, model):
    from memproc import tool
    from memproc.llm.types import ModelResponse, ToolCall

    @tool(requires_approval=True)
    def wire_money(to: str) -> str:
        """Wires money."""
        return "sent"

    agent = make_agent(tools=[wire_money])
    for resource_id in (ALICE, BOB):
        model.add(
            ModelResponse(tool_calls=[ToolCall("w1", "wire_money", {"to": "x"})], finish_reason="tool_calls")
        )
        assert agent.generate("My card is 4111", thread_id="t", resource_id=resource_id).suspended
    assert resource_purge(resource_id=ALICE, dry_run=True).pending_tool_calls == 1
    with TestCase.captureOnCommitCallbacks(execute=True):
        counts = resource_purge(resource_id=ALICE)
    assert counts.pending_tool_calls == 1
    assert list(models.PendingToolCall.objects.values_list("resource_id", flat=True)) == [BOB]
