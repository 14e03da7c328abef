"""memproc's request parsers: bodies up to memproc's own limit, whatever the site's Django limit.

A turn's body may carry a file of MAX_ATTACHMENT_BYTES as a data URI, which is 4/3 of its size in
base64, plus the rest of the request: `attachment_body_limit()`. Django refuses a body read through
`request.body` over DATA_UPLOAD_MAX_MEMORY_SIZE (2.5 MiB by default) with an HTML 400, and DRF reads
JSON through `request.body` for its own `JSONParser` (and for subclasses of it). These parsers read
the request stream themselves, with memproc's limit, so a site need not raise its global setting:
a body over the limit is `RequestTooLarge` (a JSON 413), refused from its declared length before it
is read, and counted while it is read (a length may be missing or understated).

After `MemprocJSONParser` has read a body, `request.body` still gives it (it is kept on the request).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import IO, Any

from django.conf import settings as django_settings
from django.http.multipartparser import MultiPartParser as DjangoMultiPartParser
from django.http.multipartparser import MultiPartParserError
from rest_framework.exceptions import ParseError
from rest_framework.parsers import BaseParser, DataAndFiles
from rest_framework.renderers import JSONRenderer
from rest_framework.settings import api_settings
from rest_framework.utils import json as drf_json

from memproc.exceptions import RequestTooLarge
from memproc.services.attachments import attachment_body_limit

CHUNK_BYTES = 64 * 1024


def body_limit() -> int:
    """The largest body memproc reads: one file of MAX_ATTACHMENT_BYTES in base64, and the envelope."""
    return attachment_body_limit()


def too_large(limit: int, size: int | None = None) -> RequestTooLarge:
    said = f"{size} bytes" if size is not None else f"more than {limit} bytes"
    return RequestTooLarge(
        f"The request body is {said}; memproc reads at most {limit} bytes "
        "(a file of MAX_ATTACHMENT_BYTES as base64, and the rest of the request).",
        limit=limit,
        size=size,
    )


def declared_length(parser_context: Mapping[str, Any] | None) -> int | None:
    """The request's Content-Length, if it declares a usable one."""
    request = (parser_context or {}).get("request")
    meta = getattr(request, "META", None) or {}
    try:
        length = int(meta.get("CONTENT_LENGTH") or meta.get("HTTP_CONTENT_LENGTH") or -1)
    except (TypeError, ValueError):
        return None
    return length if length >= 0 else None


def check_declared_length(parser_context: Mapping[str, Any] | None, limit: int) -> None:
    length = declared_length(parser_context)
    if length is not None and length > limit:
        raise too_large(limit, length)


def read_limited(stream: IO[bytes], limit: int) -> bytes:
    """The whole stream, or RequestTooLarge as soon as more than `limit` bytes have been read."""
    chunks: list[bytes] = []
    total = 0
    while True:
        chunk = stream.read(min(CHUNK_BYTES, limit + 1 - total))
        if not chunk:
            return b"".join(chunks)
        total += len(chunk)
        if total > limit:
            raise too_large(limit)
        chunks.append(chunk)


class LimitedReader:
    """A file-like view of a stream that raises RequestTooLarge once more than `limit` bytes are read
    (Django's multipart parser reads with `read(size)`)."""

    def __init__(self, stream: IO[bytes], limit: int) -> None:
        self.stream = stream
        self.limit = limit
        self.total = 0

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            size = self.limit + 1 - self.total
        data = self.stream.read(size)
        self.total += len(data)
        if self.total > self.limit:
            raise too_large(self.limit)
        return data


class MemprocJSONParser(BaseParser):
    """JSON, as DRF's JSONParser reads it (the request's charset, STRICT_JSON), up to `body_limit()`.

    Deliberately not a subclass of `rest_framework.parsers.JSONParser`: DRF hands its JSONParser the
    body through `request.body`, which applies DATA_UPLOAD_MAX_MEMORY_SIZE; any other parser gets
    the request stream."""

    media_type = "application/json"
    renderer_class = JSONRenderer

    def parse(
        self,
        stream: IO[bytes],
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        parser_context = parser_context or {}
        limit = body_limit()
        check_declared_length(parser_context, limit)
        raw = read_limited(stream, limit)
        keep_body(parser_context, raw)
        encoding = parser_context.get("encoding") or django_settings.DEFAULT_CHARSET
        try:
            text = raw.decode(encoding)
            parse_constant = drf_json.strict_constant if api_settings.STRICT_JSON else None
            return json.loads(text, parse_constant=parse_constant)
        except (ValueError, LookupError) as exc:  # JSON errors and UnicodeDecodeError are ValueErrors
            raise ParseError(f"JSON parse error - {exc}") from exc


class MemprocMultiPartParser(BaseParser):
    """DRF's MultiPartParser with memproc's body limit on the whole form (files included). Django's
    own limits still apply inside it: DATA_UPLOAD_MAX_MEMORY_SIZE to the non-file fields (a refusal
    answers 413), DATA_UPLOAD_MAX_NUMBER_FIELDS and _FILES (400)."""

    media_type = "multipart/form-data"

    def parse(
        self,
        stream: IO[bytes],
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> DataAndFiles:
        parser_context = parser_context or {}
        limit = body_limit()
        check_declared_length(parser_context, limit)
        request = parser_context["request"]
        meta = request.META.copy()
        meta["CONTENT_TYPE"] = media_type
        encoding = parser_context.get("encoding") or django_settings.DEFAULT_CHARSET
        body = LimitedReader(stream, limit)
        try:
            data, files = DjangoMultiPartParser(meta, body, request.upload_handlers, encoding).parse()
        except MultiPartParserError as exc:
            raise ParseError(f"Multipart form parse error - {exc}") from exc
        return DataAndFiles(data, files)


def keep_body(parser_context: Mapping[str, Any], raw: bytes) -> None:
    """Keeps the body read from the stream on the Django request, so `request.body` still gives it
    (Django refuses `body` after its stream was read, and DRF re-reads it to render some errors)."""
    request = parser_context.get("request")
    django_request = getattr(request, "_request", None)
    if django_request is not None and not hasattr(django_request, "_body"):
        django_request._body = raw
