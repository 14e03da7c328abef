"""Files on the attachment storage that no attachment row references.

A turn writes a file before its row exists (the row is written when the turn commits, see the
package's docstring); a turn that is blocked or fails deletes it, but a process killed in between
leaves the file behind with no row that names it. `orphan_files_purge` finds such files under
memproc's folder of the storage and deletes those older than a grace period, so a turn in flight,
whose row is still to come, is never touched.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

from django.core.files.storage import Storage
from django.utils import timezone

from memproc import models
from memproc.services.attachments.files import attachment_storage, file_delete
from memproc.storage import storage_errors

# Where file_save writes (`attachment_upload_to`): nothing else of the storage is memproc's.
FOLDER = "memproc"
BATCH = 1000


def orphan_files_purge(*, before: datetime, dry_run: bool = False) -> int:
    """Deletes the files under memproc's folder of the attachment storage that no attachment row
    references and that were last modified before `before`; returns how many (with `dry_run`, how
    many would go, deleting nothing). Names are checked against the rows 1000 at a time; only a file
    no row names has its time read (one request per file on S3). Raises StorageUnavailable when the
    storage fails while it lists."""
    storage = attachment_storage()
    deleted = 0
    for names in _batches(_files(storage, FOLDER)):
        referenced = set(models.Attachment.objects.filter(file__in=names).values_list("file", flat=True))
        for name in names:
            if name in referenced or not _modified_before(storage, name, before):
                continue
            if not dry_run:
                file_delete(storage, name)
            deleted += 1
    return deleted


def _files(storage: Storage, folder: str) -> Iterator[str]:
    """Every file under `folder`, depth first (`listdir` works on the file system and on S3)."""
    with storage_errors("listing files"):
        try:
            directories, files = storage.listdir(folder)
        except FileNotFoundError:  # nothing stored yet, or a folder emptied meanwhile
            return
    for name in sorted(files):
        yield f"{folder}/{name}"
    for directory in sorted(directories):
        yield from _files(storage, f"{folder}/{directory}")


def _batches(names: Iterator[str]) -> Iterator[list[str]]:
    batch: list[str] = []
    for name in names:
        batch.append(name)
        if len(batch) == BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


def _modified_before(storage: Storage, name: str, before: datetime) -> bool:
    """False when the time cannot be read (the file went meanwhile): it is left for the next run."""
    try:
        modified = storage.get_modified_time(name)
    except Exception:
        return False
    if timezone.is_naive(modified):
        modified = timezone.make_aware(modified)
    return modified < before
