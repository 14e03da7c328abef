"""The zip form of an export: `export.json` and the attachment files as `files/<attachment id>`.

Reading one treats it as hostile: `ImportLimits` bounds what is read and inflated, and how deep the
JSON nests; a zip is checked from its declared sizes before anything inflates, and again while it
does."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import stat
import struct
import tempfile
import uuid
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

from memproc import logs, models
from memproc.conf import settings
from memproc.exceptions import ValidationError
from memproc.services.attachments import attachment_read
from memproc.services.export.document import ARCHIVE_DOCUMENT, resource_export

logger = logging.getLogger(__name__)

FILES = "files/"
CHUNK_BYTES = 1024 * 1024
SPOOL_BYTES = 64 * 1024 * 1024
# A directory entry is 46 bytes and the member's name and extra fields; memproc's names are 42.
DIRECTORY_ENTRY_BYTES = 256
END_RECORD_SEARCH = 22 + 65_535  # the end record, after a comment of at most 64 KiB


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
            archive.writestr(f"{FILES}{item['id']}", data)
            written += 1
    return {"attachments": written, "missing": missing}


@dataclass(frozen=True)
class ImportLimits:
    """What an import reads at most; an export past a limit is refused (ImportRefused) before a row is
    written. `max_bytes`: the export as read and everything its zip inflates to (the document and the
    files, counted while inflating); `max_document_bytes`: the JSON document, which is parsed whole
    (into several times its size in memory), where files are read one at a time; `max_files`: the
    zip's attachment files; `max_ratio`: how many times its
    compressed size a member may inflate to once past `ratio_grace` bytes (a deflate bomb reaches
    1000:1, JSON rarely 20:1); `max_depth`: JSON nesting. An attachment file is limited to
    MAX_ATTACHMENT_BYTES, as an upload is."""

    max_bytes: int = 1024 * 1024 * 1024
    max_document_bytes: int = 256 * 1024 * 1024
    max_files: int = 10_000
    max_ratio: int = 100
    ratio_grace: int = 1024 * 1024
    max_depth: int = 100

    @property
    def document_bytes(self) -> int:
        return min(self.max_document_bytes, self.max_bytes)


class ImportRefused(ValidationError):
    """An export past one of the ImportLimits, or a zip that cannot be read; nothing was imported."""

    code = "import_refused"


def archive_read(
    source: IO[bytes] | str | Path, *, limits: ImportLimits | None = None
) -> tuple[dict[str, Any], ZipFiles | None]:
    """The document, and a source of attachment bytes (`ZipFiles`: attachment id -> bytes, or None
    when the archive lacks the file; close it when done), from an export: a zip written by
    `resource_export_zip`, or plain JSON (no files: the source is None). Raises ImportRefused past
    `limits` (the source of bytes too, when it is called) and ValidationError for what is not an
    export."""
    limits = limits or ImportLimits()
    export = _seekable(source, limits.max_bytes)
    if not zipfile.is_zipfile(export):
        with export:
            export.seek(0)
            raw = _read_capped(export, limits.document_bytes, what="The export's JSON document")
        return document_loads(raw, max_depth=limits.max_depth), None
    try:  # the zip stays open for its ZipFiles; closing them (or dropping them) closes the file
        return _Archive(export, limits).read()
    except BaseException:
        export.close()
        raise


def document_loads(raw: bytes | str, *, max_depth: int = ImportLimits.max_depth) -> dict[str, Any]:
    """The export document from JSON text: nested at most `max_depth` deep (checked before parsing,
    so no parser recurses past it), without NaN or Infinity (no database stores them)."""
    try:
        text = raw.decode("utf-8-sig") if isinstance(raw, bytes) else raw
    except UnicodeDecodeError as exc:
        raise ValidationError(f"Not a memproc export: not UTF-8 text ({exc})") from exc
    if _nested_past(text, max_depth):
        raise ImportRefused(f"The export's JSON is nested more than {max_depth} deep")
    try:
        document = json.loads(text, parse_constant=_no_constant)
    except ValidationError:
        raise
    except ValueError as exc:
        raise ValidationError(f"Not a memproc export: not JSON ({exc})") from exc
    if not isinstance(document, dict):
        raise ValidationError("Not a memproc export: the document is not a JSON object")
    return document


_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_BRACKET = re.compile(r"[\[\]{}]")


def _nested_past(text: str, limit: int) -> bool:
    """Whether JSON text nests deeper than `limit`, counting its brackets outside strings."""
    depth = 0
    for match in _BRACKET.finditer(_STRING.sub("", text)):
        if match.group() in "[{":
            depth += 1
            if depth > limit:
                return True
        elif depth:
            depth -= 1
    return False


def _no_constant(name: str) -> None:
    raise ValidationError(f"Not a memproc export: {name} is not a number a database stores")


def _seekable(source: IO[bytes] | str | Path, limit: int) -> IO[bytes]:
    """The export as a seekable file: a regular file as it is, a stream (stdin, a pipe) copied to a
    temporary file (in memory up to SPOOL_BYTES); over `limit` bytes it is refused."""
    if isinstance(source, (str, Path)):
        file = Path(source).open("rb")
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode):
            with file:
                return _seekable(file, limit)
        if info.st_size > limit:
            file.close()
            raise _too_large("The export", limit)
        return file
    spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)
    try:
        _copy_capped(source, spool, limit, what="The export")
    except BaseException:
        spool.close()
        raise
    spool.seek(0)
    return cast(IO[bytes], spool)


def _read_capped(stream: IO[bytes], limit: int, *, what: str) -> bytes:
    """The whole stream, refused as soon as more than `limit` bytes have been read."""
    buffer = io.BytesIO()
    _copy_capped(stream, buffer, limit, what=what)
    return buffer.getvalue()


def _copy_capped(stream: IO[bytes], target: IO[bytes], limit: int, *, what: str) -> None:
    total = 0
    while chunk := stream.read(min(CHUNK_BYTES, limit + 1 - total)):
        total += len(chunk)
        if total > limit:
            raise _too_large(what, limit)
        target.write(chunk)


def _too_large(what: str, limit: int) -> ImportRefused:
    return ImportRefused(f"{what} is larger than the import limit of {limit} bytes")


class _Archive:
    """A zip export, read within ImportLimits: its directory's size and member count are checked
    before zipfile parses it, each member's declared size and ratio before it is inflated, and the
    bytes inflated again while they are (a header may understate them)."""

    def __init__(self, export: IO[bytes], limits: ImportLimits) -> None:
        self.export = export
        self.limits = limits
        self.inflated = 0

    def read(self) -> tuple[dict[str, Any], ZipFiles]:
        self.directory_check()
        try:
            archive = zipfile.ZipFile(self.export)
        except (zipfile.BadZipFile, ValueError, EOFError, struct.error) as exc:
            raise ImportRefused(f"Not a readable zip: {exc}") from exc
        members = archive.infolist()
        if len(members) > self.limits.max_files + 1:
            raise ImportRefused(self.too_many(len(members)))
        wanted = {info.filename: info for info in members if self.is_read(info.filename)}
        if ARCHIVE_DOCUMENT not in wanted:
            raise ValidationError(f"Not a memproc export: the zip holds no {ARCHIVE_DOCUMENT}")
        for info in wanted.values():
            self.declared_check(info)
        declared = sum(info.file_size for info in wanted.values())
        if declared > self.limits.max_bytes:
            raise ImportRefused(
                f"The zip's files would inflate to {declared} bytes; the import limit is "
                f"{self.limits.max_bytes} bytes"
            )
        document = document_loads(
            self.inflate(archive, wanted[ARCHIVE_DOCUMENT]), max_depth=self.limits.max_depth
        )
        return document, ZipFiles(self, archive, wanted)

    @staticmethod
    def is_read(name: str) -> bool:
        return name == ARCHIVE_DOCUMENT or name.startswith(FILES)

    def member_limit(self, info: zipfile.ZipInfo) -> tuple[int, str]:
        if info.filename == ARCHIVE_DOCUMENT:
            return self.limits.document_bytes, "the import limit of the JSON document"
        return int(settings.MAX_ATTACHMENT_BYTES), "MAX_ATTACHMENT_BYTES"

    def too_many(self, count: int) -> str:
        return (
            f"The zip holds {count} members; an import reads at most {self.limits.max_files + 1} "
            f"({ARCHIVE_DOCUMENT} and {self.limits.max_files} files)"
        )

    def directory_check(self) -> None:
        """The member count and directory size the zip's end record declares. zipfile builds an
        object per directory entry, as many as the directory's size holds, whatever the count says."""
        count, size = _end_record(self.export)
        if count > self.limits.max_files + 1:
            raise ImportRefused(self.too_many(count))
        if size > (self.limits.max_files + 1) * DIRECTORY_ENTRY_BYTES:
            raise ImportRefused(
                f"The zip's directory is {size} bytes, more than {self.limits.max_files + 1} members need"
            )

    def declared_check(self, info: zipfile.ZipInfo) -> None:
        name = info.filename
        if info.flag_bits & 0x1:
            raise ImportRefused(f"{name}: encrypted zip members are not read")
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise ImportRefused(f"{name}: only stored and deflated zip members are read")
        limit, what = self.member_limit(info)
        if info.file_size > limit:
            raise ImportRefused(f"{name} would inflate to {info.file_size} bytes; {what} is {limit} bytes")
        self.ratio_check(name, info.file_size, info.compress_size)

    def ratio_check(self, name: str, size: int, compressed: int) -> None:
        ratio = self.limits.max_ratio
        if size > self.limits.ratio_grace and size > ratio * max(compressed, 1):
            raise ImportRefused(
                f"{name} inflates to {size} bytes from {compressed} (a compression ratio over "
                f"{ratio}:1): a zip bomb, not an export"
            )

    def inflate(self, archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> bytes:
        """The member's bytes, counted as they inflate: past its limit, the import limit or the
        ratio, reading stops."""
        name = info.filename
        limit, what = self.member_limit(info)
        chunks: list[bytes] = []
        size = 0
        try:
            with archive.open(info) as stream:
                while chunk := stream.read(CHUNK_BYTES):
                    size += len(chunk)
                    self.inflated += len(chunk)
                    if size > limit:
                        raise ImportRefused(f"{name} inflates past {what}, {limit} bytes")
                    if self.inflated > self.limits.max_bytes:
                        raise ImportRefused(
                            f"The zip inflates past the import limit of {self.limits.max_bytes} bytes"
                        )
                    self.ratio_check(name, size, info.compress_size)
                    chunks.append(chunk)
        except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
            raise ImportRefused(
                f"{name}: the zip is damaged or its headers do not match its data ({exc})"
            ) from exc
        return b"".join(chunks)


class ZipFiles:
    """The attachment files of a zip export: attachment id -> bytes (None: not in the zip), each read
    within the import's limits. `close()` closes the zip and its file."""

    def __init__(self, reader: _Archive, archive: zipfile.ZipFile, members: dict[str, zipfile.ZipInfo]):
        self.reader = reader
        self.archive = archive
        self.members = members

    def __call__(self, attachment_id: str) -> bytes | None:
        info = self.members.get(f"{FILES}{attachment_id}")
        return None if info is None else self.reader.inflate(self.archive, info)

    def close(self) -> None:
        self.archive.close()
        self.reader.export.close()

    def __del__(self) -> None:
        self.close()


def _end_record(export: IO[bytes]) -> tuple[int, int]:
    """(members, directory bytes) as the zip's end of central directory record declares them, from
    its zip64 record when the plain one defers to it (the 76 bytes before it)."""
    size = export.seek(0, io.SEEK_END)
    export.seek(max(0, size - END_RECORD_SEARCH - 76))
    raw = export.read()
    end = raw.rfind(b"PK\x05\x06", max(0, len(raw) - END_RECORD_SEARCH))
    if end < 0 or len(raw) < end + 22:
        raise ImportRefused("Not a readable zip: no end of central directory record")
    count, size = struct.unpack_from("<HI", raw, end + 10)
    if count == 0xFFFF or size == 0xFFFFFFFF:
        zip64 = end - 20 - 56  # the zip64 record, then its locator, come right before
        if zip64 < 0 or raw[zip64 : zip64 + 4] != b"PK\x06\x06":
            raise ImportRefused("Not a readable zip: its zip64 end record is missing")
        count, size = struct.unpack_from("<QQ", raw, zip64 + 32)
    return count, size


def _read(attachment: models.Attachment | None) -> bytes | None:
    if attachment is None or not attachment.file:
        return None
    try:
        return attachment_read(attachment=attachment)
    except Exception as exc:  # a missing file must not stop the rest of the export
        logs.failure(
            logger,
            "memproc: could not read attachment file %s",
            attachment.file.name,
            exc=exc,
            level=logging.WARNING,
        )
        return None
