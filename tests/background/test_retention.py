"""RETENTION: expired messages (with their embeddings and files), tripwire logs, turn records and
orphan attachments are deleted; nothing else is. A dry run only counts."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.checks import run_checks
from django.core.management import call_command
from django.utils import timezone

from memproc import Memory
from memproc.messages import AttachmentRef, TextPart
from memproc.messages import Message as MessageValue
from memproc.models import Attachment, Message, MessageEmbedding, TripwireLog, TurnRecord
from memproc.services.attachments import attachment_store
from memproc.services.purge import expired_purge, resource_purge

pytestmark = pytest.mark.django_db

T, R = "t-ret", "r-ret"


@pytest.fixture(autouse=True)
def _own_attachment_storage(settings, tmp_path):
    """A FileSystemStorage of its own per test, so the orphan-file sweep sees only this test's files."""
    settings.STORAGES = {
        **settings.STORAGES,
        "memproc_attachments": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": tmp_path / "attachments"},
        },
    }


@pytest.fixture
def history(make_agent, model):
    """Two turns, one of them 40 days old, with their records; one old and one new tripwire log."""
    agent = make_agent(memory=Memory())
    for text in ("old question", "new question"):
        model.add("answer")
        agent.generate(text, thread_id=T, resource_id=R)
    old = timezone.now() - timedelta(days=40)
    first_turn = list(Message.objects.order_by("sequence").values_list("public_id", flat=True))[:2]
    Message.objects.filter(public_id__in=first_turn).update(created_at=old)
    first_record = min(TurnRecord.objects.all(), key=lambda r: r.started_at)
    TurnRecord.objects.filter(pk=first_record.pk).update(started_at=old)
    for when in (old, timezone.now()):
        TripwireLog.objects.create(processor_id="p", phase="input", reason="r", created_at=when)


def test_nothing_expires_by_default_but_old_logs_and_records(history, settings):
    counts = expired_purge(now=timezone.now() + timedelta(days=60))  # 100 days after the old turn
    assert counts == {
        "messages": 0,
        "orphan_attachments": 0,
        "orphan_files": 0,
        "tripwire_logs": 1,
        "turn_records": 1,
    }
    assert Message.objects.count() == 4


def test_expired_messages_go_with_their_embeddings_and_the_rest_stays(history, settings):
    settings.MEMPROC = {**settings.MEMPROC, "RETENTION": {"messages_days": 30, "turn_records_days": 30}}
    expected = {
        "messages": 2,
        "orphan_attachments": 0,
        "orphan_files": 0,
        "tripwire_logs": 0,
        "turn_records": 1,
    }
    assert expired_purge(dry_run=True) == expected
    assert Message.objects.count() == 4  # a dry run deletes nothing
    counts = expired_purge()
    assert counts == expected
    assert list(Message.objects.order_by("sequence").values_list("text", flat=True)) == [
        "new question",
        "answer",
    ]
    assert TurnRecord.objects.count() == 1 and TripwireLog.objects.count() == 2
    assert set(expired_purge().values()) == {0}  # idempotent


def test_none_keeps_forever(history, settings):
    settings.MEMPROC = {
        **settings.MEMPROC,
        "RETENTION": {"tripwire_logs_days": None, "turn_records_days": None, "orphan_attachments_days": None},
    }
    assert expired_purge(now=timezone.now() + timedelta(days=3650)) == {
        "messages": 0,
        "orphan_attachments": 0,
        "orphan_files": 0,
        "tripwire_logs": 0,
        "turn_records": 0,
    }


def test_the_command_is_a_dry_run_without_yes(history, settings, capsys):
    settings.MEMPROC = {**settings.MEMPROC, "RETENTION": {"messages_days": 30}}
    call_command("memproc_purge", "--expired")
    assert "Would delete" in capsys.readouterr().out and Message.objects.count() == 4
    call_command("memproc_purge", "--expired", "--yes")
    assert Message.objects.count() == 2


def test_the_command_wants_a_resource_or_expired():
    from django.core.management.base import CommandError

    with pytest.raises(CommandError):
        call_command("memproc_purge")
    with pytest.raises(CommandError):
        call_command("memproc_purge", "someone", "--expired")


def test_a_resource_purge_takes_its_turn_records(history):
    counts = resource_purge(resource_id=R)
    assert counts.turn_records == 2 and not TurnRecord.objects.exists()


@pytest.mark.parametrize(
    "retention",
    [
        {"message_days": 3},
        {"messages_days": 0},
        {"messages_days": "7"},
        [30],
        {"turn_records_days": True},
        {"orphan_attachments_days": 0},
        {"orphan_attachments_days": 1.5},
    ],
)
def test_check_refuses_a_bad_retention(settings, retention):
    settings.MEMPROC = {**settings.MEMPROC, "RETENTION": retention}
    assert "memproc.E006" in [e.id for e in run_checks()]


def test_check_accepts_a_good_retention(settings):
    settings.MEMPROC = {
        **settings.MEMPROC,
        "RETENTION": {"messages_days": 365, "tripwire_logs_days": None, "orphan_attachments_days": 2},
    }
    assert "memproc.E006" not in [e.id for e in run_checks()]


# --- what goes with expired messages; orphan attachments ---------------------------------------------


def age(queryset, days: int) -> None:
    queryset.update(created_at=timezone.now() - timedelta(days=days))


@pytest.fixture
def filed(committing):
    """An old and a new message of a recall memory (embedded), the old one holding a file; an old and
    a new attachment no message holds; an old one no row links but a message references."""
    memory = Memory(semantic_recall=True)
    held = attachment_store(
        resource_id=R, data=b"held by the old message", name="a.txt", content_type="text/plain"
    )
    ref = AttachmentRef(str(held.pk), "a.txt", "text/plain", held.size)
    with committing():
        memory.save_messages(
            [
                MessageValue.create("user", (TextPart("old note"), ref), id="old"),
                MessageValue.create("user", "new note about the sea", id="new"),
            ],
            thread_id=T,
            resource_id=R,
        )
    age(Message.objects.filter(public_id="old"), 40)
    orphan = attachment_store(resource_id=R, data=b"never sent", name="o.txt", content_type="text/plain")
    fresh = attachment_store(resource_id=R, data=b"just uploaded", name="f.txt", content_type="text/plain")
    unlinked = attachment_store(resource_id=R, data=b"referenced", name="r.txt", content_type="text/plain")
    with committing():
        memory.save_messages(
            [
                MessageValue.create(
                    "user", (TextPart("see"), AttachmentRef(str(unlinked.pk), "r.txt")), id="ref"
                )
            ],
            thread_id=T,
            resource_id=R,
        )
    Attachment.objects.filter(pk=unlinked.pk).update(message=None)  # as a delete outside memproc leaves it
    age(Attachment.objects.filter(pk__in=[orphan.pk, unlinked.pk, held.pk]), 30)
    return {"held": held, "orphan": orphan, "fresh": fresh, "unlinked": unlinked}


def test_expired_messages_take_their_embeddings_and_files(filed, settings, committing):
    settings.MEMPROC = {
        **settings.MEMPROC,
        "RETENTION": {"messages_days": 30, "orphan_attachments_days": None},
    }
    held = filed["held"]
    assert MessageEmbedding.objects.filter(message__public_id="old").exists()
    with committing():
        assert expired_purge()["messages"] == 1
    assert not MessageEmbedding.objects.filter(message__public_id="old").exists()
    assert MessageEmbedding.objects.filter(message__public_id="new").exists()
    assert not Attachment.objects.filter(pk=held.pk).exists()
    assert not held.file.storage.exists(held.file.name)
    assert (
        Memory(semantic_recall=True).recall(thread_id=T, resource_id=R, query="old note", last_messages=0)
        != []
    )


def test_orphan_attachments_dry_run_then_real_run(filed, settings, committing):
    settings.MEMPROC = {**settings.MEMPROC, "RETENTION": {"orphan_attachments_days": 7}}
    orphan, fresh, unlinked = filed["orphan"], filed["fresh"], filed["unlinked"]
    assert expired_purge(dry_run=True)["orphan_attachments"] == 1
    assert Attachment.objects.filter(pk=orphan.pk).exists() and orphan.file.storage.exists(orphan.file.name)
    assert Attachment.objects.get(pk=unlinked.pk).message_id is None  # a dry run changes nothing
    with committing():
        assert expired_purge()["orphan_attachments"] == 1
        assert orphan.file.storage.exists(orphan.file.name)  # the file goes after commit
    assert not Attachment.objects.filter(pk=orphan.pk).exists()
    assert not orphan.file.storage.exists(orphan.file.name)
    assert Attachment.objects.filter(pk=fresh.pk).exists()  # younger than 7 days
    assert Attachment.objects.get(pk=unlinked.pk).message.public_id == "ref"  # referenced: linked again, kept
    assert Attachment.objects.get(pk=filed["held"].pk).message.public_id == "old"
    assert expired_purge()["orphan_attachments"] == 0


def test_orphan_attachments_expire_by_default_after_a_week(filed):
    assert expired_purge()["orphan_attachments"] == 1
    assert expired_purge(now=timezone.now() + timedelta(days=8))["orphan_attachments"] == 1  # the fresh one


def test_the_command_dry_run_prints_counts_and_deletes_nothing(filed, settings, capsys, committing):
    settings.MEMPROC = {**settings.MEMPROC, "RETENTION": {"messages_days": 30, "orphan_attachments_days": 7}}
    call_command("memproc_purge", "--expired")
    out = capsys.readouterr().out
    assert "Would delete expired data:" in out and "Dry run: nothing was deleted" in out
    assert "1  attachments no message holds (and their files)" in out
    assert "1  messages (with their embeddings and the attachment files only they used)" in out
    assert Message.objects.filter(public_id="old").exists() and Attachment.objects.count() == 4
    with committing():
        call_command("memproc_purge", "--expired", "--yes")
    out = capsys.readouterr().out
    assert "Deleted expired data:" in out and "Dry run" not in out
    assert not Message.objects.filter(public_id="old").exists()
    assert sorted(Attachment.objects.values_list("name", flat=True)) == ["f.txt", "r.txt"]
