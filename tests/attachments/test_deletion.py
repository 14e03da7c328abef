"""Deleting a message, a thread or a resource deletes its files unless another message references them."""

from __future__ import annotations

import pytest

from memproc import Memory
from memproc.models import Attachment
from memproc.services.attachments import attachments_delete
from memproc.services.threads import thread_clone, thread_delete
from tests.attachments.conftest import R, file_message, png, stored_files

pytestmark = pytest.mark.django_db


@pytest.fixture
def two_threads(make_agent, model):
    """The same image sent in thread "a" and later in thread "b" of one resource: one row, one file."""
    agent = make_agent()
    model.add("a", "b")
    first = agent.generate(file_message(png(), text="in a"), thread_id="a", resource_id=R)
    second = agent.generate(file_message(png(), text="in b"), thread_id="b", resource_id=R)
    row = Attachment.objects.get()
    assert row.message.public_id == first.messages[0].id and len(stored_files()) == 1
    return first.messages[0].id, second.messages[0].id, row


def test_deleting_the_only_message_deletes_the_file(make_agent, model, committing):
    model.add("ok")
    result = make_agent().generate(file_message(png()), thread_id="a", resource_id=R)
    with committing():
        Memory().delete_messages([result.messages[0].id])
    assert not Attachment.objects.exists() and stored_files() == []


def test_a_message_still_referencing_the_file_keeps_it(two_threads, committing):
    first, second, row = two_threads
    with committing():
        Memory().delete_messages([first])
    row.refresh_from_db()
    assert row.message.public_id == second  # handed over to the remaining reference
    assert stored_files() == [row.file.name]
    with committing():
        Memory().delete_messages([second])
    assert not Attachment.objects.exists() and stored_files() == []


def test_deleting_a_message_that_is_not_the_rows_owner_keeps_the_file(two_threads, committing):
    first, second, row = two_threads
    with committing():
        Memory().delete_messages([second])
    row.refresh_from_db()
    assert row.message.public_id == first and stored_files() == [row.file.name]


def test_deleting_a_thread_keeps_files_another_thread_references(two_threads, committing):
    first, second, row = two_threads
    with committing():
        Memory().delete_thread("a")
    assert Attachment.objects.get().message.public_id == second and len(stored_files()) == 1
    with committing():
        Memory().delete_thread("b")
    assert not Attachment.objects.exists() and stored_files() == []


def test_a_cloned_thread_keeps_the_file_when_the_original_goes(two_threads, committing):
    from memproc.models import Thread

    clone = thread_clone(thread=Thread.objects.get(public_id="a"), new_thread_id="a-copy")
    with committing():
        thread_delete(thread=Thread.objects.get(public_id="a"))
        thread_delete(thread=Thread.objects.get(public_id="b"))
    assert Attachment.objects.get().message.thread_id == clone.pk and len(stored_files()) == 1


def test_deleting_a_resource_deletes_all_its_files(make_agent, model, committing):
    agent = make_agent()
    model.add("a", "b", "c")
    agent.generate(file_message(png(rgb=(1, 1, 1))), thread_id="a", resource_id=R)
    agent.generate(file_message(png(rgb=(2, 2, 2))), thread_id="b", resource_id=R)
    agent.generate(file_message(png(rgb=(3, 3, 3))), thread_id="c", resource_id="other")
    with committing():
        assert attachments_delete(resource_id=R) == 2
    assert list(Attachment.objects.values_list("resource_id", flat=True)) == ["other"]
    assert len(stored_files()) == 1


def test_files_go_only_when_the_deletion_commits(make_agent, model):
    model.add("ok")
    result = make_agent().generate(file_message(png()), thread_id="a", resource_id=R)
    Memory().delete_messages([result.messages[0].id])  # the test's transaction never commits
    assert not Attachment.objects.exists() and len(stored_files()) == 1
