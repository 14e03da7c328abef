"""RETENTION: expired messages, tripwire logs and turn records are deleted; nothing else is."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.checks import run_checks
from django.core.management import call_command
from django.utils import timezone

from memproc import Memory
from memproc.models import Message, TripwireLog, TurnRecord
from memproc.services.purge import expired_purge, resource_purge

pytestmark = pytest.mark.django_db

T, R = "t-ret", "r-ret"


@pytest.fixture
def history(make_agent, model):
    """Two turns, one of them 40 days old, with their records; one old and one new tripwire log."""
    agent = make_agent(memory=Memory())
    for text in ("old question", "new question"):
        model.add("answer")
        agent.generate(text, thread_id=T, resource_id=R)
    old = timezone.now() - timedelta(days=40)
    first_turn = list(Message.objects.order_by("sequence").values_list("id", flat=True))[:2]
    Message.objects.filter(id__in=first_turn).update(created_at=old)
    first_record = min(TurnRecord.objects.all(), key=lambda r: r.started_at)
    TurnRecord.objects.filter(pk=first_record.pk).update(started_at=old)
    for when in (old, timezone.now()):
        TripwireLog.objects.create(processor_id="p", phase="input", reason="r", created_at=when)


def test_nothing_expires_by_default_but_old_logs_and_records(history, settings):
    counts = expired_purge(now=timezone.now() + timedelta(days=60))  # 100 days after the old turn
    assert counts == {"messages": 0, "tripwire_logs": 1, "turn_records": 1}
    assert Message.objects.count() == 4


def test_expired_messages_go_with_their_embeddings_and_the_rest_stays(history, settings):
    settings.MEMPROC = {**settings.MEMPROC, "RETENTION": {"messages_days": 30, "turn_records_days": 30}}
    assert expired_purge(dry_run=True) == {"messages": 2, "tripwire_logs": 0, "turn_records": 1}
    assert Message.objects.count() == 4  # a dry run deletes nothing
    counts = expired_purge()
    assert counts == {"messages": 2, "tripwire_logs": 0, "turn_records": 1}
    assert list(Message.objects.order_by("sequence").values_list("text", flat=True)) == [
        "new question",
        "answer",
    ]
    assert TurnRecord.objects.count() == 1 and TripwireLog.objects.count() == 2
    assert expired_purge() == {"messages": 0, "tripwire_logs": 0, "turn_records": 0}  # idempotent


def test_none_keeps_forever(history, settings):
    settings.MEMPROC = {
        **settings.MEMPROC,
        "RETENTION": {"tripwire_logs_days": None, "turn_records_days": None},
    }
    assert expired_purge(now=timezone.now() + timedelta(days=3650)) == {
        "messages": 0,
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
    [{"message_days": 3}, {"messages_days": 0}, {"messages_days": "7"}, [30], {"turn_records_days": True}],
)
def test_check_refuses_a_bad_retention(settings, retention):
    settings.MEMPROC = {**settings.MEMPROC, "RETENTION": retention}
    assert "memproc.E006" in [e.id for e in run_checks()]


def test_check_accepts_a_good_retention(settings):
    settings.MEMPROC = {**settings.MEMPROC, "RETENTION": {"messages_days": 365, "tripwire_logs_days": None}}
    assert "memproc.E006" not in [e.id for e in run_checks()]
