"""Files a turn staged but never committed (its process was killed between writing the file and the
commit that writes its row) are swept by the retention purge once they are a day old (finding 12a of
the hostile review: `kill -9` during an upload left a file that no purge removed). Files a row
references, and files younger than the grace period (a turn in flight), always stay."""

from __future__ import annotations

import hashlib
import os
import uuid
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from memproc.models import Attachment
from memproc.processors.attachment_types import CheckedFile
from memproc.services.attachments import attachment_store
from memproc.services.attachments.files import file_save
from memproc.services.purge import expired_purge
from tests.attachments.conftest import R, bucket_keys, stored_files

pytestmark = pytest.mark.django_db


def staged(data: bytes, resource_id: str = R) -> str:
    """A file written as a turn stages it, whose row never came (the process died before the commit)."""
    checked = CheckedFile(data=data, content_type="text/plain", name="note.txt", sha256=sha(data))
    return file_save(attachment_id=uuid.uuid4(), resource_id=resource_id, file=checked)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def backdate(root, name: str, days: float) -> None:
    when = (timezone.now() - timedelta(days=days)).timestamp()
    os.utime(root / name, (when, when))


def test_an_old_orphan_file_goes_and_referenced_and_fresh_files_stay(fs_storage):
    old_orphan = staged(b"killed mid-turn two days ago")
    fresh_orphan = staged(b"a turn still in flight")
    kept = attachment_store(
        resource_id=R, data=b"committed long ago", name="k.txt", content_type="text/plain"
    )
    backdate(fs_storage, old_orphan, days=2)
    backdate(fs_storage, kept.file.name, days=30)

    assert expired_purge(dry_run=True)["orphan_files"] == 1
    assert old_orphan in stored_files()  # a dry run deletes nothing
    assert expired_purge()["orphan_files"] == 1

    assert stored_files() == sorted([fresh_orphan, kept.file.name])
    assert Attachment.objects.get(pk=kept.pk).file.read() == b"committed long ago"
    assert expired_purge()["orphan_files"] == 0  # idempotent


def test_the_grace_period_follows_retention(fs_storage, settings):
    orphan = staged(b"three days old")
    backdate(fs_storage, orphan, days=3)
    settings.MEMPROC = {**settings.MEMPROC, "RETENTION": {"orphan_files_days": 7}}
    assert expired_purge()["orphan_files"] == 0 and stored_files() == [orphan]
    settings.MEMPROC = {**settings.MEMPROC, "RETENTION": {"orphan_files_days": None}}
    assert expired_purge(now=timezone.now() + timedelta(days=365))["orphan_files"] == 0
    settings.MEMPROC = {**settings.MEMPROC, "RETENTION": {"orphan_files_days": 2}}
    assert expired_purge()["orphan_files"] == 1 and stored_files() == []


def test_files_outside_memprocs_folder_are_never_touched(fs_storage):
    (fs_storage / "theirs").mkdir(parents=True)
    (fs_storage / "theirs" / "report.pdf").write_bytes(b"not memproc's")
    backdate(fs_storage, "theirs/report.pdf", days=100)
    assert expired_purge()["orphan_files"] == 0
    assert stored_files() == ["theirs/report.pdf"]


def test_the_command_reports_and_deletes_orphan_files(fs_storage, capsys):
    orphan = staged(b"left by a killed worker")
    backdate(fs_storage, orphan, days=2)
    call_command("memproc_purge", "--expired")
    assert "1  attachment files no attachment row references" in capsys.readouterr().out
    assert stored_files() == [orphan]
    call_command("memproc_purge", "--expired", "--yes")
    assert stored_files() == []


def test_an_empty_storage_is_swept_without_error(fs_storage):
    assert expired_purge()["orphan_files"] == 0


@pytest.mark.s3
def test_on_s3_a_fresh_orphan_stays_and_the_sweep_runs(s3):
    orphan = staged(b"staged on s3")
    kept = attachment_store(resource_id=R, data=b"kept on s3", name="k.txt", content_type="text/plain")
    assert expired_purge()["orphan_files"] == 0
    assert bucket_keys(s3) == sorted([orphan, kept.file.name])
    # Objects cannot be backdated: two days on, the orphan is old enough and goes; the referenced file stays.
    assert expired_purge(now=timezone.now() + timedelta(days=2))["orphan_files"] == 1
    assert bucket_keys(s3) == [kept.file.name]
