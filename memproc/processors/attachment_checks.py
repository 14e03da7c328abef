"""Finding and checking the inline files of messages: size from the encoded length, the content-type
allow-list, strict decoding, magic-byte sniffing.

The checks are plain functions here, so AttachmentUploader, the API and other services run the
same ones.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import mimetypes
import posixpath
from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import unquote_to_bytes

from memproc.conf import settings
from memproc.exceptions import AttachmentError
from memproc.messages import FilePart, Message
from memproc.processors.attachment_types import CheckedFile, InlineFile

__all__ = [
    "GENERIC_TYPES",
    "SNIFFED_TYPES",
    "TYPE_ALIASES",
    "effective_type",
    "file_check",
    "file_name",
    "inline_file",
    "inline_files_check",
    "normalise_type",
    "sniff_content_type",
    "type_allowed",
]

GENERIC_TYPES = frozenset({"", "application/octet-stream", "binary/octet-stream", "*/*", "image/*"})
# Types whose first bytes identify them: a file declared as one of these must start like one.
SNIFFED_TYPES = frozenset(
    {"image/png", "image/jpeg", "image/gif", "image/webp", "image/avif", "image/heic", "application/pdf"}
)
TYPE_ALIASES = {"image/jpg": "image/jpeg", "image/pjpeg": "image/jpeg", "image/x-png": "image/png"}
_TEXT_TYPES = frozenset({"application/json", "application/xml", "application/x-ndjson", "application/yaml"})


def inline_file(part: FilePart) -> InlineFile | None:
    """The inline file a part carries (a data: URI, base64 text or bytes), or None for a remote URL."""
    data: Any = part.data
    if data is None and isinstance(part.url, str) and part.url[:5].lower() == "data:":
        data = part.url
    if data is None:
        return None
    declared = normalise_type(part.media_type)
    name = part.name or ""
    if isinstance(data, (bytes, bytearray, memoryview)):
        return InlineFile(bytes(data), "raw", declared, name)
    if not isinstance(data, str):
        return InlineFile("", "invalid", declared, name)
    if data[:5].lower() != "data:":
        return InlineFile(data, "base64", declared, name)
    comma = data.find(",")
    if comma < 0:
        return InlineFile("", "invalid", declared, name)
    params = data[5:comma].split(";")
    is_base64 = len(params) > 1 and params[-1].strip().lower() == "base64"
    uri_type = normalise_type(params[0]) if "/" in params[0] else ""
    return InlineFile(data[comma + 1 :], "base64" if is_base64 else "percent", uri_type or declared, name)


def inline_files_check(messages: Iterable[Message], *, max_bytes: int | None = None) -> None:
    """A file sent inline (a data URI, base64) over `max_bytes` (default MAX_ATTACHMENT_BYTES) is
    refused before the turn runs, as an uploaded file over it is: AttachmentError(code="too_large"),
    a 413 in the API. The size is the decoded one, computed from the encoded length (the same
    estimate AttachmentUploader applies)."""
    limit = int(settings.MAX_ATTACHMENT_BYTES if max_bytes is None else max_bytes)
    for message in messages:
        for part in message.parts:
            file = inline_file(part) if isinstance(part, FilePart) else None
            if file is not None and file.estimated_size > limit:
                name = file.name or "An inline file"
                raise AttachmentError(
                    f"{name} is {file.estimated_size} bytes; the limit is {limit} bytes",
                    code="too_large",
                    metadata={"name": file.name, "size": file.estimated_size, "limit": limit},
                )


def file_check(file: InlineFile, *, max_bytes: int, content_types: Sequence[str] | None) -> CheckedFile:
    """Checks and decodes one inline file; raises AttachmentError with code too_large,
    type_not_allowed or undecodable. The size is checked before decoding, from the encoded length."""
    name = file.name or "file"

    def refuse(code: str, reason: str, size: int, content_type: str, **extra: Any) -> AttachmentError:
        metadata = {"name": name, "size": size, "limit": max_bytes, "content_type": content_type, **extra}
        return AttachmentError(reason, code=code, metadata=metadata)

    estimate = file.estimated_size
    if estimate > max_bytes:
        raise refuse(
            "too_large",
            f"Attachment {name!r} is {_human(estimate)}; the limit is {_human(max_bytes)}",
            estimate,
            file.media_type,
        )
    declared = file.media_type
    if declared not in GENERIC_TYPES and not type_allowed(declared, content_types):
        raise refuse(
            "type_not_allowed",
            f"Attachment {name!r} has type {declared}, which is not allowed",
            estimate,
            declared,
            allowed=list(content_types or ()),
        )
    try:
        data = _decode(file)
    except (binascii.Error, ValueError) as exc:
        raise refuse(
            "undecodable", f"Attachment {name!r} could not be decoded: {exc}", estimate, declared
        ) from exc
    if len(data) > max_bytes:
        raise refuse(
            "too_large",
            f"Attachment {name!r} is {_human(len(data))}; the limit is {_human(max_bytes)}",
            len(data),
            declared,
        )
    content_type, problem = effective_type(declared, data, name=file.name)
    if problem:
        detected = sniff_content_type(data)
        raise refuse(
            "type_not_allowed", f"Attachment {name!r} {problem}", len(data), declared, detected=detected
        )
    if not type_allowed(content_type, content_types):
        raise refuse(
            "type_not_allowed",
            f"Attachment {name!r} has type {content_type}, which is not allowed",
            len(data),
            content_type,
            allowed=list(content_types or ()),
        )
    return CheckedFile(
        data=data,
        content_type=content_type,
        name=file_name(file.name, content_type),
        sha256=hashlib.sha256(data).hexdigest(),
    )


def _decode(file: InlineFile) -> bytes:
    if file.encoding == "raw":
        return bytes(file.payload) if isinstance(file.payload, (bytes, bytearray)) else b""
    if file.encoding == "percent":
        text = file.payload if isinstance(file.payload, str) else file.payload.decode("ascii")
        return unquote_to_bytes(text)
    if file.encoding == "base64":
        return base64.b64decode(file.payload, validate=True)
    raise ValueError("not a data: URI (no comma after the header)")


def effective_type(declared: str, data: bytes, *, name: str = "") -> tuple[str, str]:
    """The type a file really has, and why it cannot be trusted ("" when it can).

    A generic declaration takes the sniffed type, else a text type guessed from the name when the
    content is text, else application/octet-stream. A sniffable type (PNG, JPEG, GIF, WebP, AVIF,
    HEIC, PDF) must match the first bytes; text must decode as UTF-8 without NUL bytes.
    """
    sniffed = sniff_content_type(data)
    if declared in GENERIC_TYPES:
        if declared == "image/*" and not (sniffed or "").startswith("image/"):
            return declared, "is declared as an image but its content is not a known image format"
        if sniffed is None:
            guessed = normalise_type(mimetypes.guess_type(name)[0]) if name else ""
            if guessed and _is_text_type(guessed) and _is_text(data):
                return guessed, ""
        return sniffed or "application/octet-stream", ""
    if sniffed is not None and sniffed != declared:
        return declared, f"is declared as {declared} but its content is {sniffed}"
    if sniffed is None and declared in SNIFFED_TYPES:
        return declared, f"is declared as {declared} but its content is not"
    if _is_text_type(declared) and not _is_text(data):
        return declared, f"is declared as {declared} but its content is not UTF-8 text"
    return declared, ""


def sniff_content_type(data: bytes) -> str | None:
    """The type named by a file's first bytes, for the formats models take as images or documents."""
    head = data[:32]
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if head.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if head.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    if head[4:8] == b"ftyp":
        brand = head[8:12]
        if brand in (b"avif", b"avis"):
            return "image/avif"
        if brand in (b"heic", b"heix", b"heim", b"heis", b"mif1"):
            return "image/heic"
    if data[:1024].lstrip(b"\xef\xbb\xbf \t\r\n\x00").startswith(b"%PDF-"):
        return "application/pdf"
    return None


def type_allowed(content_type: str, allowed: Sequence[str] | None) -> bool:
    """Whether `content_type` matches the allow-list (exact types, "image/*", "*/*"; None allows all)."""
    if allowed is None:
        return True
    major = content_type.split("/", 1)[0]
    for entry in allowed:
        entry = normalise_type(entry)
        if entry in ("*/*", "*") or entry == content_type or entry == f"{major}/*":
            return True
    return False


def normalise_type(value: str | None) -> str:
    base = (value or "").split(";", 1)[0].strip().lower()
    return TYPE_ALIASES.get(base, base)


def file_name(name: str, content_type: str) -> str:
    """A safe base name (no directories), at most 120 characters; "file.<ext>" when none was given."""
    base = posixpath.basename((name or "").replace("\\", "/")).strip().lstrip(".")
    if not base:
        base = "file" + (mimetypes.guess_extension(content_type) or "")
    if len(base) > 120:
        stem, ext = posixpath.splitext(base)
        base = stem[: 120 - len(ext[:16])] + ext[:16]
    return base


def _is_text_type(content_type: str) -> bool:
    return (
        content_type.startswith("text/")
        or content_type in _TEXT_TYPES
        or content_type.endswith(("+json", "+xml"))
    )


def _is_text(data: bytes) -> bool:
    if b"\x00" in data:
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _human(size: int) -> str:
    if size >= 1024 * 1024:
        return f"{size / (1024 * 1024):.1f} MB"
    if size >= 1024:
        return f"{size / 1024:.1f} KB"
    return f"{size} bytes"
