"""The inline-file checks every writer runs (AttachmentUploader, the API, the import): what is found
in a part, what is refused and with which words and metadata, what a passing file becomes.

No database: the checks are plain functions. The refusal texts are what the API answers (a 413 or
400 with the message and metadata), so their wording is pinned here.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import struct
import zlib

import pytest

from memproc.exceptions import AttachmentError
from memproc.messages import AttachmentRef, FilePart, Message, TextPart
from memproc.processors.attachment_checks import (
    effective_type,
    file_check,
    file_name,
    inline_file,
    inline_files_check,
    normalise_type,
    sniff_content_type,
    type_allowed,
)
from memproc.processors.attachment_types import CheckedFile, InlineFile

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PDF = b"%PDF-1.4\n1 0 obj <<>> endobj\ntrailer <<>>\n%%EOF\n"
JPEG = b"\xff\xd8\xff\xe0" + bytes(20)


def png(size: int = 2) -> bytes:
    """A real, tiny PNG."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    raw = (b"\x00" + bytes((9, 8, 7)) * size) * size
    header = struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)
    return PNG_SIGNATURE + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def refusal(file: InlineFile, *, max_bytes: int = 10_000, content_types=None) -> AttachmentError:
    with pytest.raises(AttachmentError) as caught:
        file_check(file, max_bytes=max_bytes, content_types=content_types)
    return caught.value


# --- inline_file: what a part carries ------------------------------------------------------------


def test_bytes_of_every_kind_are_a_raw_file_with_the_declared_type_and_name():
    for data in (b"abc", bytearray(b"abc"), memoryview(b"abc")):
        part = FilePart(data=data, media_type="Image/JPG; q=1", name="a.jpg")
        assert inline_file(part) == InlineFile(b"abc", "raw", "image/jpeg", "a.jpg")
    assert inline_file(FilePart(data=b"abc", media_type="text/plain")) == InlineFile(
        b"abc", "raw", "text/plain", ""
    )


def test_text_that_is_not_a_data_uri_is_base64():
    part = FilePart(data="aGk=", media_type="text/plain", name="n")
    assert inline_file(part) == InlineFile("aGk=", "base64", "text/plain", "n")
    # "dat" is not the prefix: it stays base64 text
    assert inline_file(FilePart(data="data", media_type="")) == InlineFile("data", "base64", "", "")


def test_data_that_is_neither_bytes_nor_text_is_invalid():
    part = FilePart(data=12345, media_type="image/png", name="x")  # type: ignore[arg-type]
    assert inline_file(part) == InlineFile("", "invalid", "image/png", "x")


def test_a_data_uri_in_data_or_url_any_case():
    assert inline_file(FilePart(data="DATA:text/plain;BASE64,aGk=")) == InlineFile(
        "aGk=", "base64", "text/plain", ""
    )
    assert inline_file(FilePart(url="Data:text/plain,a%20b", name="u")) == InlineFile(
        "a%20b", "percent", "text/plain", "u"
    )


def test_a_part_without_data_is_inline_only_when_its_url_is_a_data_uri():
    assert inline_file(FilePart(url="https://example.com/data:x,y")) is None
    assert inline_file(FilePart(url="datax:text/plain,hi")) is None
    assert inline_file(FilePart(media_type="image/png")) is None


def test_data_wins_over_a_data_uri_url():
    part = FilePart(data="aGk=", url="data:text/plain,other", media_type="text/plain")
    assert inline_file(part) == InlineFile("aGk=", "base64", "text/plain", "")


def test_a_data_uri_without_a_comma_is_invalid():
    part = FilePart(data="data:image/png;base64", media_type="image/png", name="p")
    assert inline_file(part) == InlineFile("", "invalid", "image/png", "p")


def test_the_data_uri_header():
    # base64 only as the last parameter, any case and spacing
    assert inline_file(FilePart(data="data:text/plain;charset=utf-8; Base64 ,aGk=")).encoding == "base64"
    assert inline_file(FilePart(data="data:text/plain;base64;charset=utf-8,aGk=")).encoding == "percent"
    # a lone "base64" is the type position, not the flag
    assert inline_file(FilePart(data="data:base64,aGk=", media_type="text/plain")) == InlineFile(
        "aGk=", "percent", "text/plain", ""
    )
    # no type in the URI: the part's declared type stands; a type there wins, normalised
    assert inline_file(FilePart(data="data:;base64,aGk=", media_type="text/csv")).media_type == "text/csv"
    assert (
        inline_file(FilePart(data="data:IMAGE/X-PNG;base64,AA==", media_type="text/csv")).media_type
        == "image/png"
    )
    # only the first comma ends the header
    assert inline_file(FilePart(data="data:text/plain,a,b")).payload == "a,b"


# --- inline_files_check: the size limit before a turn or an import runs ----------------------------


def file_message(*files: FilePart) -> Message:
    return Message.create("user", [TextPart("look"), *files])


def test_inline_files_up_to_the_limit_pass():
    messages = [file_message(FilePart(data=b"x" * 10, name="a")), Message.create("user", "no files")]
    assert inline_files_check(messages, max_bytes=10) is None


def test_an_inline_file_over_the_limit_is_refused_with_its_name_size_and_limit():
    messages = [
        file_message(FilePart(data=b"x" * 5, name="small")),
        file_message(FilePart(data=b64(b"y" * 11), media_type="text/plain", name="notes.txt")),
    ]
    with pytest.raises(AttachmentError) as caught:
        inline_files_check(messages, max_bytes=10)
    assert str(caught.value) == "notes.txt is 11 bytes; the limit is 10 bytes"
    assert caught.value.code == "too_large"
    assert caught.value.metadata == {"name": "notes.txt", "size": 11, "limit": 10}


def test_an_unnamed_inline_file_is_called_an_inline_file():
    with pytest.raises(AttachmentError) as caught:
        inline_files_check([file_message(FilePart(data=b"x" * 3))], max_bytes=2)
    assert str(caught.value) == "An inline file is 3 bytes; the limit is 2 bytes"
    assert caught.value.metadata == {"name": "", "size": 3, "limit": 2}


def test_a_limit_of_zero_is_a_limit_and_remote_files_are_not_counted():
    with pytest.raises(AttachmentError):
        inline_files_check([file_message(FilePart(data=b"x"))], max_bytes=0)
    inline_files_check([file_message(FilePart(url="https://example.com/big.png"))], max_bytes=0)


def test_the_default_limit_is_the_setting(settings):
    settings.MEMPROC = {**settings.MEMPROC, "MAX_ATTACHMENT_BYTES": 4}
    inline_files_check([file_message(FilePart(data=b"1234"))])
    with pytest.raises(AttachmentError) as caught:
        inline_files_check([file_message(FilePart(data=b"12345"))])
    assert caught.value.metadata["limit"] == 4


# --- InlineFile and CheckedFile sizes --------------------------------------------------------------


@pytest.mark.parametrize(
    "payload, encoding, size",
    [
        ("aGk=", "base64", 2),
        ("aA==", "base64", 1),
        (b"aA==", "base64", 1),
        ("aGVsbG8h", "base64", 6),
        ("a=bc", "base64", 3),  # only the last two characters can be padding
        ("", "base64", 0),
        ("=", "base64", 0),  # never negative
        ("aA==", "percent", 4),
        (b"abcdef", "raw", 6),
        ("", "invalid", 0),
    ],
)
def test_estimated_size(payload, encoding, size):
    assert InlineFile(payload, encoding, "", "").estimated_size == size


def test_a_checked_file_size_is_its_decoded_length():
    assert CheckedFile(data=b"12345", content_type="text/plain", name="a", sha256="").size == 5


# --- file_check: refusals ---------------------------------------------------------------------------


def test_too_large_by_the_estimate_before_decoding():
    error = refusal(InlineFile("!" * 2000, "percent", "text/plain", "big.txt"), max_bytes=1000)
    assert str(error) == "Attachment 'big.txt' is 2.0 KB; the limit is 1000 bytes"
    assert error.code == "too_large"
    assert error.metadata == {"name": "big.txt", "size": 2000, "limit": 1000, "content_type": "text/plain"}


def test_a_file_exactly_at_the_limit_passes():
    checked = file_check(InlineFile(b"x" * 8, "raw", "text/plain", "a.txt"), max_bytes=8, content_types=None)
    assert checked.size == 8


def test_too_large_once_decoded():
    # percent-encoded non-ASCII text decodes to more bytes than it has characters
    error = refusal(InlineFile("ééé", "percent", "text/plain", ""), max_bytes=4)
    assert str(error) == "Attachment 'file' is 6 bytes; the limit is 4 bytes"
    assert error.code == "too_large"
    assert error.metadata == {"name": "file", "size": 6, "limit": 4, "content_type": "text/plain"}
    assert (
        file_check(InlineFile("éé", "percent", "text/plain", ""), max_bytes=4, content_types=None).size == 4
    )


def test_a_declared_type_off_the_list_is_refused_before_decoding():
    error = refusal(
        InlineFile("not base64!", "base64", "text/html", "page.html"), content_types=["text/plain"]
    )
    assert str(error) == "Attachment 'page.html' has type text/html, which is not allowed"
    assert error.code == "type_not_allowed"
    assert error.metadata == {
        "name": "page.html",
        "size": 8,
        "limit": 10_000,
        "content_type": "text/html",
        "allowed": ["text/plain"],
    }


def test_an_empty_allow_list_is_reported_as_empty():
    error = refusal(InlineFile(b"hello", "raw", "text/plain", "a"), content_types=[])
    assert error.metadata["allowed"] == []


@pytest.mark.parametrize(
    "file, reason",
    [
        (InlineFile("aG k=", "base64", "text/plain", "a.txt"), "Only base64 data is allowed"),
        (InlineFile("aGk", "base64", "text/plain", "a.txt"), "Incorrect padding"),
        (InlineFile("", "invalid", "text/plain", "a.txt"), "not a data: URI (no comma after the header)"),
    ],
)
def test_undecodable(file, reason):
    error = refusal(file)
    assert str(error) == f"Attachment 'a.txt' could not be decoded: {reason}"
    assert error.code == "undecodable"
    assert error.metadata == {
        "name": "a.txt",
        "size": file.estimated_size,
        "limit": 10_000,
        "content_type": "text/plain",
    }
    assert isinstance(error.__cause__, (binascii.Error, ValueError))


def test_content_that_contradicts_the_declared_type_is_refused_with_what_it_is():
    error = refusal(InlineFile(b64(JPEG), "base64", "image/png", "photo.png"))
    assert str(error) == "Attachment 'photo.png' is declared as image/png but its content is image/jpeg"
    assert error.code == "type_not_allowed"
    assert error.metadata == {
        "name": "photo.png",
        "size": len(JPEG),
        "limit": 10_000,
        "content_type": "image/png",
        "detected": "image/jpeg",
    }
    error = refusal(InlineFile(b"plain", "raw", "application/pdf", ""))
    assert str(error) == "Attachment 'file' is declared as application/pdf but its content is not"
    assert error.metadata["detected"] is None


def test_the_sniffed_type_must_be_on_the_list_too():
    error = refusal(InlineFile(png(), "raw", "", "pic"), content_types=["application/pdf"])
    assert str(error) == "Attachment 'pic' has type image/png, which is not allowed"
    assert error.code == "type_not_allowed"
    assert error.metadata == {
        "name": "pic",
        "size": len(png()),
        "limit": 10_000,
        "content_type": "image/png",
        "allowed": ["application/pdf"],
    }


# --- file_check: what passes ------------------------------------------------------------------------


def test_a_passing_file_is_decoded_typed_named_and_hashed():
    data = png()
    checked = file_check(
        InlineFile(b64(data), "base64", "application/octet-stream", "dir/pic.png"),
        max_bytes=10_000,
        content_types=["image/*"],
    )
    assert checked == CheckedFile(
        data=data, content_type="image/png", name="pic.png", sha256=hashlib.sha256(data).hexdigest()
    )


def test_every_encoding_decodes():
    def data(file: InlineFile) -> bytes:
        return file_check(file, max_bytes=100, content_types=None).data

    assert data(InlineFile("aGk=", "base64", "text/plain", "")) == b"hi"
    assert data(InlineFile("a%20b", "percent", "text/plain", "")) == b"a b"
    assert data(InlineFile(b"a%20b", "percent", "text/plain", "")) == b"a b"
    assert data(InlineFile(b"raw bytes", "raw", "text/plain", "")) == b"raw bytes"
    assert data(InlineFile(bytearray(b"raw"), "raw", "text/plain", "")) == b"raw"
    assert data(InlineFile("not bytes", "raw", "", "")) == b""


def test_percent_encoded_bytes_must_be_ascii():
    error = refusal(InlineFile(b"caf\xc3\xa9", "percent", "text/plain", "a.txt"))
    assert error.code == "undecodable"
    assert str(error) == (
        "Attachment 'a.txt' could not be decoded: 'ascii' codec can't decode byte 0xc3 in position 3: "
        "ordinal not in range(128)"
    )


def test_an_unnamed_file_is_named_after_its_type():
    checked = file_check(InlineFile(PDF, "raw", "", ""), max_bytes=10_000, content_types=None)
    assert (checked.name, checked.content_type) == ("file.pdf", "application/pdf")


# --- effective_type -----------------------------------------------------------------------------------


@pytest.mark.parametrize("declared", ["", "application/octet-stream", "binary/octet-stream", "*/*"])
def test_a_generic_declaration_takes_the_sniffed_type(declared):
    assert effective_type(declared, png()) == ("image/png", "")
    assert effective_type(declared, b"\x00\x01\x02") == ("application/octet-stream", "")


def test_image_star_must_be_an_image():
    assert effective_type("image/*", png()) == ("image/png", "")
    problem = "is declared as an image but its content is not a known image format"
    assert effective_type("image/*", PDF) == ("image/*", problem)
    assert effective_type("image/*", b"words", name="a.txt") == ("image/*", problem)


@pytest.mark.parametrize(
    "name, guessed",
    [
        ("table.csv", "text/csv"),
        ("notes.md", "text/markdown"),
        ("data.json", "application/json"),
        ("feed.xml", "application/xml"),
        ("shape.geojson", "application/geo+json"),
        ("logo.svg", "image/svg+xml"),
    ],
)
def test_a_generic_declaration_with_text_takes_the_text_type_of_the_name(name, guessed):
    assert effective_type("", b"some text", name=name) == (guessed, "")
    assert effective_type("", b"bin\x00ary", name=name) == ("application/octet-stream", "")
    assert effective_type("", b"\xff\xfe bad utf-8", name=name) == ("application/octet-stream", "")


def test_a_name_that_does_not_name_a_text_type_is_not_taken():
    assert effective_type("", b"some text", name="photo.png") == ("application/octet-stream", "")
    assert effective_type("", b"some text", name="README") == ("application/octet-stream", "")
    assert effective_type("", b"some text") == ("application/octet-stream", "")


def test_the_sniffed_type_wins_over_the_name():
    assert effective_type("", PDF, name="notes.txt") == ("application/pdf", "")


def test_a_declared_type_must_agree_with_the_content():
    assert effective_type("image/png", png()) == ("image/png", "")
    assert effective_type("image/gif", png()) == (
        "image/gif",
        "is declared as image/gif but its content is image/png",
    )
    assert effective_type("image/webp", b"text") == (
        "image/webp",
        "is declared as image/webp but its content is not",
    )
    # a type no signature names is taken as declared
    assert effective_type("image/tiff", b"II*\x00") == ("image/tiff", "")
    assert effective_type("application/zip", b"PK\x03\x04") == ("application/zip", "")
    # except a text type, whose content must be UTF-8 without NUL bytes
    assert effective_type("text/plain", "héllo".encode()) == ("text/plain", "")


@pytest.mark.parametrize(
    "declared",
    [
        "text/plain",
        "application/json",
        "application/xml",
        "application/x-ndjson",
        "application/yaml",
        "application/ld+json",
        "image/svg+xml",
    ],
)
def test_a_declared_text_type_must_be_text(declared):
    reason = f"is declared as {declared} but its content is not UTF-8 text"
    assert effective_type(declared, b"a\x00b") == (declared, reason)
    assert effective_type(declared, b"\xc3\x28") == (declared, reason)
    assert effective_type(declared, b"fine") == (declared, "")


def test_a_non_text_type_may_hold_any_bytes():
    assert effective_type("application/vnd.ms-excel", b"\x00\xc3\x28") == ("application/vnd.ms-excel", "")


# --- sniff_content_type ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data, expected",
    [
        (PNG_SIGNATURE, "image/png"),
        (PNG_SIGNATURE[:-1] + b"\x00", None),
        (b"\xff\xd8\xff", "image/jpeg"),
        (b"\xff\xd8\x00", None),
        (b"GIF87a", "image/gif"),
        (b"GIF89a", "image/gif"),
        (b"GIF88a", None),
        (b"RIFF\x10\x00\x00\x00WEBPVP8 ", "image/webp"),
        (b"RIFF\x10\x00\x00\x00WAVEfmt ", None),
        (b"RIFX\x10\x00\x00\x00WEBPVP8 ", None),
        (b"\x00\x00\x00\x1cftypavif\x00\x00\x00\x00", "image/avif"),
        (b"\x00\x00\x00\x1cftypavis\x00\x00\x00\x00", "image/avif"),
        (b"\x00\x00\x00\x1cftypheic\x00\x00\x00\x00", "image/heic"),
        (b"\x00\x00\x00\x1cftypheix\x00\x00\x00\x00", "image/heic"),
        (b"\x00\x00\x00\x1cftypheim\x00\x00\x00\x00", "image/heic"),
        (b"\x00\x00\x00\x1cftypheis\x00\x00\x00\x00", "image/heic"),
        (b"\x00\x00\x00\x1cftypmif1\x00\x00\x00\x00", "image/heic"),
        (b"\x00\x00\x00\x1cftypmp42\x00\x00\x00\x00", None),
        (b"\x00\x00\x00\x1cmoovavif\x00\x00\x00\x00", None),
        (b"%PDF-1.7", "application/pdf"),
        (b"\xef\xbb\xbf \t\r\n\x00%PDF-1.7", "application/pdf"),
        (b"%PDF", None),
        (b"x%PDF-1.7", None),
        (b"X%PDF-1.7", None),
        (b"", None),
    ],
)
def test_sniffing(data, expected):
    assert sniff_content_type(data) == expected


def test_a_pdf_header_counts_within_the_first_kilobyte_only():
    assert sniff_content_type(b" " * 1019 + b"%PDF-1.7") == "application/pdf"
    assert sniff_content_type(b" " * 1020 + b"%PDF-1.7") is None


# --- type_allowed, normalise_type, file_name ------------------------------------------------------------


def test_the_allow_list():
    assert type_allowed("anything/at-all", None)
    assert not type_allowed("image/png", [])
    assert type_allowed("image/png", ["text/plain", "image/png"])
    assert type_allowed("image/png", ["IMAGE/*"])
    assert type_allowed("image/jpeg", [" image/jpg ; q=1"])
    assert type_allowed("video/mp4", ["*"]) and type_allowed("video/mp4", ["*/*"])
    assert not type_allowed("video/mp4", ["image/*", "video/mpeg"])
    assert not type_allowed("image/png", ["image"])
    # the major type is what comes before the first slash
    assert type_allowed("application/vnd/odd", ["application/*"])
    assert not type_allowed("application/vnd/odd", ["application/vnd/*"])


def test_normalise_type():
    assert normalise_type(None) == ""
    assert normalise_type("") == ""
    assert normalise_type("  Text/Plain ; charset=utf-8; format=flowed") == "text/plain"
    assert normalise_type("image/pjpeg") == "image/jpeg"
    assert normalise_type("IMAGE/X-PNG") == "image/png"
    assert normalise_type("image/jpg") == "image/jpeg"


@pytest.mark.parametrize(
    "name, content_type, expected",
    [
        ("../../etc/passwd", "text/plain", "passwd"),
        ("C:\\Users\\me\\photo.png", "image/png", "photo.png"),
        ("  .hidden  ", "text/plain", "hidden"),
        ("Xray.png", "image/png", "Xray.png"),
        ("...", "image/png", "file.png"),
        ("dir/", "image/jpeg", "file.jpg"),
        ("", "application/pdf", "file.pdf"),
        ("", "x-unknown/thing", "file"),
        ("a" * 120, "text/plain", "a" * 120),
        ("a" * 117 + ".txt", "text/plain", "a" * 116 + ".txt"),
        ("a" * 200 + "." + "b" * 30, "text/plain", "a" * 104 + "." + "b" * 15),
    ],
)
def test_file_names_are_made_safe_and_short(name, content_type, expected):
    assert file_name(name, content_type) == expected
    assert len(file_name(name, content_type)) <= 120


# --- sizes in words, references -----------------------------------------------------------------------


def test_size_units_in_refusals():
    def too_large(size: int, limit: int) -> str:
        return str(refusal(InlineFile(b"x" * size, "raw", "text/plain", "a"), max_bytes=limit))

    assert too_large(1024, 1023) == "Attachment 'a' is 1.0 KB; the limit is 1023 bytes"
    assert too_large(1536, 1024) == "Attachment 'a' is 1.5 KB; the limit is 1.0 KB"
    assert too_large(1024 * 1024, 1024 * 1024 - 1) == "Attachment 'a' is 1.0 MB; the limit is 1024.0 KB"
    assert too_large(1076, 1075) == "Attachment 'a' is 1.1 KB; the limit is 1.0 KB"
    assert too_large(1101825, 1101824) == "Attachment 'a' is 1.1 MB; the limit is 1.1 MB"


def test_attachment_refs_are_unaffected_by_checks():
    message = Message.create("user", [AttachmentRef("att-1", "a.png", "image/png", 3)])
    inline_files_check([message], max_bytes=0)
