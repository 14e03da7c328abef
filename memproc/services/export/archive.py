"""The zip form of an export: `export.json` and the attachment files as `files/<attachment id>`."""

from __future__ import annotations

import io
import json
import logging
import uuid
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from memproc import models
from memproc.exceptions import ValidationError
from memproc.services.attachments import attachment_read
from memproc.services.export.document import ARCHIVE_DOCUMENT, resource_export

logger = logging.getLogger(__name__)

FileSource = Callable[[str], "bytes | None"]


def resource_export_zip(*, resource_id: str, target: IO[bytes]) -> dict[str, int]:
    """Writes a zip of the export document and the attachment files to `target`. Returns counts:
    `attachments` written, `missing` files the storage could not read (logged; an import skips
    those attachments unless their files are still in its storage)."""
    document = resource_export(resource_id=resource_id)
    ids = [uuid.UUID(item["id"]) for item in document["attachments"]]
    rows = models.Attachment.objects.in_bulk(ids)
    written = missing = 0
    with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(ARCHIVE_DOCUMENT, json.dumps(document, indent=1))
        for item in document["attachments"]:
            data = _read(rows.get(uuid.UUID(item["id"])))
            if data is None:
                missing += 1
                continue
            archive.writestr(f"files/{item['id']}", data)
            written += 1
    return {"attachments": written, "missing": missing}


def archive_read(source: IO[bytes] | str | Path) -> tuple[dict[str, Any], FileSource | None]:
    """The document, and a source of attachment bytes (attachment id -> bytes, or None when the
    archive lacks the file), from an export: a zip written by `resource_export_zip`, or plain JSON
    (no files: the source is None)."""
    if isinstance(source, (str, Path)):
        raw = Path(source).read_bytes()
    else:
        raw = source.read()
    if not zipfile.is_zipfile(io.BytesIO(raw)):
        return document_loads(raw), None
    archive = zipfile.ZipFile(io.BytesIO(raw))
    names = set(archive.namelist())
    if ARCHIVE_DOCUMENT not in names:
        raise ValidationError(f"Not a memproc export: the zip holds no {ARCHIVE_DOCUMENT}")

    def read(attachment_id: str) -> bytes | None:
        name = f"files/{attachment_id}"
        return archive.read(name) if name in names else None

    return document_loads(archive.read(ARCHIVE_DOCUMENT)), read


def document_loads(raw: bytes | str) -> dict[str, Any]:
    try:
        document = json.loads(raw)
    except ValueError as exc:
        raise ValidationError(f"Not a memproc export: not JSON ({exc})") from exc
    if not isinstance(document, dict):
        raise ValidationError("Not a memproc export: the document is not a JSON object")
    return document


def _read(attachment: models.Attachment | None) -> bytes | None:
    if attachment is None or not attachment.file:
        return None
    try:
        return attachment_read(attachment=attachment)
    except Exception:  # a missing file must not stop the rest of the export
        logger.warning("memproc: could not read attachment file %s", attachment.file.name, exc_info=True)
        return None
