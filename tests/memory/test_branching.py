"""Branching a conversation (clone_thread up to a message) and editing stored messages
(update_messages): ids, order, working memory, embeddings, attachments, text and token counts."""

from __future__ import annotations

import pytest

from memproc import Memory
from memproc.exceptions import ValidationError
from memproc.messages import AttachmentRef, Message, TextPart, ToolCallPart, ToolResultPart
from memproc.models import (
    Attachment,
    MessageEmbedding,
    OutboxJob,
    Thread,
    WorkingMemoryRevision,
    message_key,
    thread_key,
)
from memproc.models import Message as MessageRow
from memproc.services.attachments import attachment_store

pytestmark = pytest.mark.django_db
R = "brancher"


@pytest.fixture
def recall_memory() -> Memory:
    return Memory(
        last_messages=20,
        semantic_recall={"top_k": 2, "message_range": 0, "scope": "thread"},
        working_memory={"scope": "thread"},
    )


@pytest.fixture
def conversation(recall_memory, committing) -> list[Message]:
    messages = [
        Message.create("user", "I want to plan a trip to Lisbon"),
        Message.create("assistant", "Lisbon in spring is lovely"),
        Message.create("user", "Actually make it Porto"),
        Message.create("assistant", "Porto has great port wine cellars"),
    ]
    with committing():
        recall_memory.save_messages(messages, thread_id="trip", resource_id=R)
    recall_memory.update_working_memory("# User\n- Name: Ana", thread_id="trip", resource_id=R)
    return messages


def stored_texts(thread_id: str) -> list[str]:
    return list(
        MessageRow.objects.filter(thread_id=thread_key(R, thread_id))
        .order_by("sequence")
        .values_list("text", flat=True)
    )


# --- branching ----------------------------------------------------------------------------------------


def test_a_branch_holds_the_messages_up_to_and_including_the_one_named(recall_memory, conversation):
    branch = recall_memory.clone_thread("trip", new_thread_id="trip-b", up_to_message_id=conversation[1].id)
    assert branch.public_id == "trip-b" and branch.pk == thread_key(R, "trip-b") and branch.resource_id == R
    assert stored_texts("trip-b") == ["I want to plan a trip to Lisbon", "Lisbon in spring is lovely"]
    rows = list(MessageRow.objects.filter(thread__public_id="trip-b").order_by("sequence"))
    assert [r.sequence for r in rows] == [1, 2]
    assert {r.public_id for r in rows}.isdisjoint(m.id for m in conversation)  # new, unique ids
    assert [r.created_at for r in rows] == [
        m.created_at
        for m in MessageRow.objects.filter(public_id__in=[conversation[0].id, conversation[1].id]).order_by(
            "sequence"
        )
    ]
    assert Thread.objects.get(public_id="trip-b").last_sequence == 2
    assert branch.metadata == {"cloned_from": "trip", "branched_at": conversation[1].id}
    assert branch.title.startswith("Branch of")
    assert stored_texts("trip") == [m.text for m in conversation]  # the original is untouched


def test_the_branch_continues_on_its_own(recall_memory, conversation, committing):
    recall_memory.clone_thread("trip", new_thread_id="trip-b", up_to_message_id=conversation[1].id)
    with committing():
        recall_memory.save_messages(
            [Message.create("user", "What about Madrid?")], thread_id="trip-b", resource_id=R
        )
    assert stored_texts("trip-b")[-1] == "What about Madrid?"
    assert MessageRow.objects.get(thread__public_id="trip-b", text="What about Madrid?").sequence == 3
    assert len(stored_texts("trip")) == 4


def test_working_memory_is_copied_with_a_revision(recall_memory, conversation):
    recall_memory.clone_thread("trip", new_thread_id="trip-b", up_to_message_id=conversation[0].id)
    assert recall_memory.get_working_memory(thread_id="trip-b") == "# User\n- Name: Ana"
    revision = WorkingMemoryRevision.objects.get(key=thread_key(R, "trip-b"))
    assert (revision.old, revision.new, revision.version, revision.thread_id) == (
        "",
        "# User\n- Name: Ana",
        1,
        thread_key(R, "trip-b"),
    )
    # A change in the branch does not reach the original
    recall_memory.update_working_memory("# User\n- Name: Bea", thread_id="trip-b", resource_id=R)
    assert recall_memory.get_working_memory(thread_id="trip") == "# User\n- Name: Ana"


def test_embeddings_are_copied_so_the_branch_recalls_at_once(recall_memory, conversation):
    recall_memory.clone_thread("trip", new_thread_id="trip-b", up_to_message_id=conversation[1].id)
    copies = MessageEmbedding.objects.filter(thread_id="trip-b")
    assert copies.count() == 2
    assert set(copies.values_list("resource_id", flat=True)) == {R}
    found = recall_memory.recall(thread_id="trip-b", resource_id=R, query="Lisbon spring", last_messages=0)
    assert "Lisbon in spring is lovely" in [m.text for m in found]
    assert all(m.thread_id == "trip-b" for m in found)


def test_a_message_of_another_thread_cannot_be_a_branch_point(recall_memory, conversation, committing):
    with committing():
        recall_memory.save_messages(
            [Message.create("user", "elsewhere", id="other-1")], thread_id="other", resource_id=R
        )
    with pytest.raises(ValidationError, match="no message"):
        recall_memory.clone_thread("trip", new_thread_id="bad", up_to_message_id="other-1")
    assert not Thread.objects.filter(public_id="bad").exists()


def test_the_summary_goes_with_a_copy_that_holds_all_it_covers(recall_memory, conversation):
    from memproc.models import ThreadSummary

    MessageRow.objects.filter(thread_id=thread_key(R, "trip"), sequence=1).delete()  # a gap: copies renumber
    ThreadSummary.objects.create(
        thread_id=thread_key(R, "trip"), text="Ana plans a trip.", covered_sequence=3, token_count=4
    )
    after = recall_memory.clone_thread(
        thread_id="trip", new_thread_id="late", up_to_message_id=conversation[3].id
    )
    before = recall_memory.clone_thread(
        thread_id="trip", new_thread_id="early", up_to_message_id=conversation[1].id
    )
    summary = ThreadSummary.objects.get(pk=after.pk)
    assert (summary.text, summary.covered_sequence) == ("Ana plans a trip.", 2)  # old 2 and 3 are new 1 and 2
    assert not ThreadSummary.objects.filter(pk=before.pk).exists()  # would tell what came after


def test_a_whole_clone_still_copies_everything(recall_memory, conversation):
    clone = recall_memory.clone_thread("trip", new_thread_id="copy")
    assert stored_texts("copy") == [m.text for m in conversation]
    assert clone.metadata == {"cloned_from": "trip"} and clone.title.startswith("Clone of")


def test_a_taken_id_is_refused_and_nothing_is_copied(recall_memory, conversation):
    Memory().create_thread(resource_id=R, thread_id="taken")
    with pytest.raises(ValidationError):
        recall_memory.clone_thread("trip", new_thread_id="taken", up_to_message_id=conversation[0].id)
    assert MessageRow.objects.filter(thread__public_id="taken").count() == 0


def test_an_id_taken_only_by_another_resource_is_free_for_the_clone(recall_memory, conversation):
    # A thread id names a thread within its resource: another resource's "taken" is not in the way.
    other = Memory().create_thread(resource_id="other", thread_id="taken")
    clone = recall_memory.clone_thread("trip", new_thread_id="taken", up_to_message_id=conversation[0].id)
    assert (clone.public_id, clone.resource_id) == ("taken", R)
    assert stored_texts("taken") == ["I want to plan a trip to Lisbon"]
    # The other resource's thread is untouched.
    assert MessageRow.objects.filter(thread_id=other.pk).count() == 0


# --- editing messages ---------------------------------------------------------------------------------


def test_an_edit_changes_content_and_text_and_reembeds_after_commit(recall_memory, conversation, committing):
    target = conversation[1]
    old_vectors = set(
        MessageEmbedding.objects.filter(message__public_id=target.id).values_list("content_hash", flat=True)
    )
    with committing():
        [updated] = recall_memory.update_messages([{"id": target.id, "content": "Porto in autumn is lovely"}])
        assert not MessageEmbedding.objects.filter(
            message__public_id=target.id
        ).exists()  # gone before commit
    assert updated.text == "Porto in autumn is lovely" and updated.role == "assistant"
    row = MessageRow.objects.get(public_id=target.id)
    assert row.text == "Porto in autumn is lovely"
    assert row.content == {"parts": [{"type": "text", "text": "Porto in autumn is lovely"}]}
    assert row.sequence == 2  # the place in the thread stays
    new_vectors = set(
        MessageEmbedding.objects.filter(message__public_id=target.id).values_list("content_hash", flat=True)
    )
    assert new_vectors and new_vectors != old_vectors
    found = recall_memory.recall(
        thread_id="trip", resource_id=R, query="Porto in autumn", last_messages=0, limit=1
    )
    assert [m.id for m in found] == [target.id]


def test_an_edit_under_celery_is_an_outbox_job_sent_after_commit(
    recall_memory, conversation, settings, monkeypatch
):
    from django.test import TestCase

    from memproc import background

    sent = []
    monkeypatch.setattr(background, "celery_send", lambda name, kwargs, **_: sent.append((name, kwargs)))
    settings.MEMPROC = {**settings.MEMPROC, "BACKGROUND": "celery"}
    with TestCase.captureOnCommitCallbacks(execute=False) as callbacks:
        recall_memory.update_messages([Message.create("user", "Make it Faro", id=conversation[2].id)])
    assert OutboxJob.objects.filter(task="memproc.embed_messages").count() == 1 and sent == []
    for callback in callbacks:
        callback()
    assert sent == [("memproc.embed_messages", {"message_ids": [message_key(R, conversation[2].id)]})]


def test_without_recall_or_embeddings_nothing_is_embedded(committing):
    memory = Memory()
    with committing():
        memory.save_messages(
            [Message.create("user", "hello", id="plain-1")], thread_id="plain", resource_id=R
        )
        memory.update_messages([{"id": "plain-1", "content": "hello again"}])
    assert not MessageEmbedding.objects.exists()
    assert MessageRow.objects.get(public_id="plain-1").text == "hello again"


def test_a_token_count_is_counted_again(committing):
    memory = Memory()
    with committing():
        memory.save_messages(
            [Message.create("user", "short", id="tc-1", metadata={"token_count": 1})],
            thread_id="tc",
            resource_id=R,
        )
    assert MessageRow.objects.get(public_id="tc-1").token_count == 1
    memory.update_messages([{"id": "tc-1", "content": "a much longer message than the one before it"}])
    assert MessageRow.objects.get(public_id="tc-1").token_count > 5


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"id": "missing", "content": "x"}, "No stored message"),
        ({"id": "tool-a", "role": "user", "content": "x"}, "role"),
        ({"id": "tool-a", "parts": [{"type": "text", "text": "no calls now"}]}, "tool calls"),
        ({"id": "note", "parts": [{"type": "file", "data": "aGVsbG8=", "media_type": "text/plain"}]}, "file"),
        (
            {
                "id": "note",
                "parts": [{"type": "attachment", "attachment_id": "00000000-0000-0000-0000-000000000000"}],
            },
            "attachments",
        ),
        ([{"id": "note", "content": "one"}, {"id": "note", "content": "two"}], "once"),
    ],
)
def test_refused_edits_change_nothing(committing, change, error):
    memory = Memory()
    call = ToolCallPart("c1", "weather", {"city": "Porto"})
    with committing():
        memory.save_messages(
            [
                Message.create("assistant", (TextPart("checking"), call), id="tool-a"),
                Message.create("tool", (ToolResultPart("c1", "weather", "sunny"),), id="tool-r"),
                Message.create("user", "a note", id="note"),
            ],
            thread_id="tools",
            resource_id=R,
        )
    before = dict(MessageRow.objects.values_list("public_id", "content"))
    with pytest.raises(ValidationError, match=error):
        memory.update_messages(change if isinstance(change, list) else [change])
    assert dict(MessageRow.objects.values_list("public_id", "content")) == before


def test_a_tool_message_may_change_its_text_keeping_its_calls(committing):
    memory = Memory()
    call = ToolCallPart("c1", "weather", {"city": "Porto"})
    with committing():
        memory.save_messages(
            [Message.create("assistant", (TextPart("checking"), call), id="tool-a")],
            thread_id="t",
            resource_id=R,
        )
    memory.update_messages([Message.create("assistant", (TextPart("looking it up"), call), id="tool-a")])
    assert MessageRow.objects.get(public_id="tool-a").text == "looking it up"


def test_a_dropped_attachment_is_released_and_a_new_one_linked(committing, settings):
    memory = Memory()
    kept = attachment_store(resource_id=R, data=b"first file", name="a.txt", content_type="text/plain")
    new = attachment_store(resource_id=R, data=b"second file", name="b.txt", content_type="text/plain")
    storage, kept_name = kept.file.storage, kept.file.name
    ref = AttachmentRef(str(kept.pk), "a.txt", "text/plain", 10)
    with committing():
        memory.save_messages(
            [Message.create("user", (TextPart("see"), ref), id="with-file")], thread_id="f", resource_id=R
        )
    assert Attachment.objects.get(pk=kept.pk).message.public_id == "with-file"
    swapped = AttachmentRef(str(new.pk), "b.txt", "text/plain", 11)
    with committing():
        memory.update_messages(
            [Message.create("user", (TextPart("see this instead"), swapped), id="with-file")]
        )
    assert not Attachment.objects.filter(pk=kept.pk).exists() and not storage.exists(kept_name)
    assert Attachment.objects.get(pk=new.pk).message.public_id == "with-file"
