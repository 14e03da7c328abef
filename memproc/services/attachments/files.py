"""Attachment files on the storage: staging, storing outside a turn, URLs, size checks for requests."""

from __future__ import annotations

import inspect
import logging
import re
import uuid
from collections.abc import Mapping
from typing import Any

from django.core.files.base import ContentFile
from django.core.files.storage import Storage
from django.db import IntegrityError, transaction

from memproc import logs, models
from memproc.admission import admission_paused
from memproc.conf import settings
from memproc.db import memproc_db
from memproc.exceptions import AttachmentError
from memproc.processors.attachment_checks import file_check, normalise_type
from memproc.processors.attachment_types import CheckedFile, InlineFile, StagedAttachment
from memproc.services.attachments.types import stored_extension
from memproc.storage import storage_errors, storage_waiting

logger = logging.getLogger(__name__)

# Room for the JSON or multipart envelope around a file in a request body (text, history, headers).
REQUEST_ENVELOPE_BYTES = 1024 * 1024


class DjangoAttachmentStore:
    """The `AttachmentStore` AttachmentUploader uses: files on the storage named by
    ATTACHMENT_STORAGE, rows in `memproc.models.Attachment`, one per resource and sha256."""

    def stage(self, *, resource_id: str, file: CheckedFile) -> StagedAttachment:
        """Reuses the resource's row for these bytes, or writes the file (and no row: see commit)."""
        row = models.Attachment.objects.filter(resource_id=resource_id, sha256=file.sha256).first()
        if row is not None:
            return staged_for(row.pk, resource_id, file, file_name=row.file.name, created=False)
        attachment_id = uuid.uuid4()
        name = file_save(attachment_id=attachment_id, resource_id=resource_id, file=file)
        return staged_for(attachment_id, resource_id, file, file_name=name, created=True)


def attachment_store(*, resource_id: str, data: bytes, name: str, content_type: str) -> models.Attachment:
    """Stores a file for a resource now and returns its row (its message is set when a saved message
    first references it). The same bytes for the same resource return the existing row. The file
    passes the checks a turn applies (size, allow-list, sniffing); a refusal raises AttachmentError
    with code too_large or type_not_allowed."""
    checked = file_check(
        InlineFile(bytes(data), "raw", normalise_type(content_type), name),
        max_bytes=int(settings.MAX_ATTACHMENT_BYTES),
        content_types=allowed_types(),
    )
    existing = models.Attachment.objects.filter(resource_id=resource_id, sha256=checked.sha256).first()
    if existing is not None:
        return existing
    attachment_id = uuid.uuid4()
    file_name = file_save(attachment_id=attachment_id, resource_id=resource_id, file=checked)
    item = staged_for(attachment_id, resource_id, checked, file_name=file_name, created=True)
    try:
        winner = row_insert(item)
    except Exception:
        file_delete(attachment_storage(), file_name)
        raise
    if winner != item.id:
        file_delete(attachment_storage(), file_name)
    return models.Attachment.objects.get(pk=winner)


def attachment_body_limit(*, max_bytes: int | None = None) -> int:
    """The largest request body that can carry one file of MAX_ATTACHMENT_BYTES: the file in base64
    (4/3 of its size) plus REQUEST_ENVELOPE_BYTES for the rest of the request."""
    limit = int(max_bytes or settings.MAX_ATTACHMENT_BYTES)
    return 4 * -(-limit // 3) + REQUEST_ENVELOPE_BYTES


def attachment_check_size(*, content_length: int | str | None, max_bytes: int | None = None) -> None:
    """Refuses a request body before it is read when its declared length (the Content-Length header)
    exceeds `attachment_body_limit()`: AttachmentError(code="too_large"), which the API answers with
    413. A missing or malformed length passes (the turn checks each file again)."""
    try:
        length = int(content_length) if content_length not in (None, "") else None
    except (TypeError, ValueError):
        return
    limit = attachment_body_limit(max_bytes=max_bytes)
    if length is not None and length > limit:
        raise AttachmentError(
            f"The request body is {length} bytes; requests with files are limited to {limit} bytes",
            code="too_large",
            metadata={"size": length, "limit": limit},
        )


def attachment_url(*, attachment: models.Attachment, expiry: int | None = None) -> str:
    """The file's URL from its storage. Storages that sign URLs (S3Storage, Azure) sign it for
    `expiry` seconds (default ATTACHMENT_URL_EXPIRY); FileSystemStorage gives its plain URL.
    Raises StorageUnavailable if the storage fails (S3 signs locally; other storages may not)."""
    expiry = int(settings.ATTACHMENT_URL_EXPIRY if expiry is None else expiry)
    storage = attachment.file.storage
    with storage_errors("making a file's URL"):
        if "expire" in _parameters(storage.url):
            return storage.url(attachment.file.name, expire=expiry)
        return storage.url(attachment.file.name)


def attachment_read(*, attachment: models.Attachment) -> bytes:
    """The file's bytes; StorageUnavailable if the storage fails or has lost the file."""
    with storage_waiting("reading a file"):
        with attachment.file.storage.open(attachment.file.name, "rb") as handle:
            return handle.read()


def attachment_delete(*, attachment: models.Attachment) -> None:
    name, storage = attachment.file.name, attachment.file.storage
    attachment.delete()
    transaction.on_commit(lambda: file_delete(storage, name), using=memproc_db())


# --- helpers shared by the package ----------------------------------------------------------------


def attachment_storage() -> Storage:
    return models.Attachment._meta.get_field("file").storage


def file_save(*, attachment_id: uuid.UUID, resource_id: str, file: CheckedFile) -> str:
    """Writes the bytes under a name unique to the attachment id, so two rows, or a row and a turn
    still staging, never share a file (whatever the storage's overwrite setting).

    A storage that fails raises StorageUnavailable, after an attempt to delete whatever the failed
    write left under that name (a partly written file, an object stored whose answer was lost)."""
    field = models.Attachment._meta.get_field("file")
    instance = models.Attachment(id=attachment_id, resource_id=_path_segment(resource_id), sha256=file.sha256)
    # The server's name, not the client's: its extension decides how a plain file server types it.
    target = field.generate_filename(
        instance, f"{attachment_id.hex[:12]}/{attachment_id.hex}{stored_extension(file.content_type)}"
    )
    content = ContentFile(file.data, name=file.name)
    content.content_type = file.content_type  # type: ignore[attr-defined]  # S3Storage sends it as Content-Type
    with storage_waiting("storing a file"):
        try:
            return field.storage.save(target, content, max_length=field.max_length)
        except Exception:
            file_delete(field.storage, target)  # the name is this attachment's alone
            raise


def file_delete(storage: Storage, name: str) -> None:
    try:
        with admission_paused():
            storage.delete(name)
    except Exception as exc:  # a missing file or a storage that is down must not fail a delete
        logs.failure(
            logger, "memproc: could not delete attachment file %s", name, exc=exc, level=logging.WARNING
        )


def file_delete_on_commit(name: str) -> None:
    storage = attachment_storage()
    transaction.on_commit(lambda: file_delete(storage, name), using=memproc_db())


def row_insert(item: StagedAttachment) -> str:
    """Inserts the row of a staged file; returns its id, or the id of the row a concurrent writer
    inserted first for the same resource and sha256."""
    try:
        with transaction.atomic(using=memproc_db()):
            models.Attachment.objects.create(
                id=uuid.UUID(item.id),
                resource_id=item.resource_id,
                file=item.file_name,
                name=item.name[:255],
                content_type=item.content_type[:255],
                size=item.size,
                sha256=item.sha256,
            )
        return item.id
    except IntegrityError:
        existing = (
            models.Attachment.objects.filter(resource_id=item.resource_id, sha256=item.sha256)
            .values_list("pk", flat=True)
            .first()
        )
        if existing is None:
            raise
        return str(existing)


def unsaved_row(item: StagedAttachment) -> models.Attachment:
    return models.Attachment(
        id=uuid.UUID(item.id),
        resource_id=item.resource_id,
        file=item.file_name,
        name=item.name,
        content_type=item.content_type,
        size=item.size,
        sha256=item.sha256,
    )


def staged_for(
    attachment_id: Any, resource_id: str, file: CheckedFile, *, file_name: str, created: bool
) -> StagedAttachment:
    return StagedAttachment(
        id=str(attachment_id),
        resource_id=resource_id,
        name=file.name,
        content_type=file.content_type,
        size=file.size,
        sha256=file.sha256,
        file_name=file_name,
        created=created,
    )


def allowed_types() -> tuple[str, ...] | None:
    allowed = settings.ATTACHMENT_CONTENT_TYPES
    return None if allowed is None else tuple(allowed)


def _path_segment(resource_id: str) -> str:
    """A resource id made safe as one directory name (ids are client-chosen strings)."""
    return re.sub(r"[^A-Za-z0-9_@-]+", "_", resource_id)[:64] or "_"


def parse_uuid(value: Any) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(value))
    except (TypeError, ValueError):
        return None


def _parameters(func: Any) -> Mapping[str, Any]:
    try:
        return inspect.signature(func).parameters
    except (TypeError, ValueError):
        return {}
