"""Fixtures for attachment tests: a fresh FileSystemStorage per test, files, agents, a moto S3 server."""

from __future__ import annotations

import base64
import struct
import zlib
from pathlib import Path

import pytest
from django.core.files.storage import storages
from django.test import TestCase

from memproc.messages import FilePart, Message, TextPart

T, R = "t1", "user-1"
BUCKET = "memproc-test"


def png(size: int = 4, rgb: tuple[int, int, int] = (200, 30, 30)) -> bytes:
    """A real, tiny PNG."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    raw = (b"\x00" + bytes(rgb) * size) * size
    header = struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


PDF = b"%PDF-1.4\n1 0 obj <<>> endobj\ntrailer <<>>\n%%EOF\n"


def data_uri(data: bytes, media_type: str = "image/png") -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode('ascii')}"


def file_message(
    data: bytes | str, media_type: str = "image/png", name: str | None = "pic.png", text: str = "look"
):
    """A user message with a text part and one inline file part."""
    return Message.create("user", [TextPart(text), FilePart(data=data, media_type=media_type, name=name)])


def stored_files() -> list[str]:
    """Every file on the attachment storage (FileSystemStorage: walk its location)."""
    location = Path(storages["memproc_attachments"].location)
    return sorted(str(p.relative_to(location)) for p in location.rglob("*") if p.is_file())


@pytest.fixture(autouse=True)
def fs_storage(settings, tmp_path):
    """A FileSystemStorage of its own for each test, with a relative URL like the default."""
    settings.STORAGES = {
        **settings.STORAGES,
        "memproc_attachments": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": tmp_path / "attachments", "base_url": "/media/attachments/"},
        },
    }
    return tmp_path / "attachments"


@pytest.fixture
def make_agent(make_agent):
    """The shared committing agents, introduced as looking at files."""

    def build(**kwargs):
        kwargs.setdefault("id", "files-agent")
        kwargs.setdefault("instructions", "You look at files.")
        return make_agent(**kwargs)

    return build


@pytest.fixture
def committing():
    """Runs the on_commit callbacks of the code inside it on exit, as a real commit would."""
    return lambda: TestCase.captureOnCommitCallbacks(execute=True)


# --- S3 (moto's server mode) ----------------------------------------------------------------------


@pytest.fixture(scope="session")
def s3_endpoint():
    """A real S3 HTTP endpoint on 127.0.0.1 (moto's threaded server), for the whole session."""
    server_module = pytest.importorskip("moto.server")
    server = server_module.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def s3(s3_endpoint, settings, monkeypatch):
    """A fresh bucket, and the attachment storage pointed at it through django-storages' S3Storage."""
    import uuid

    import boto3

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    bucket = f"{BUCKET}-{uuid.uuid4().hex[:8]}"
    client = boto3.client(
        "s3",
        endpoint_url=s3_endpoint,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name="us-east-1",
    )
    client.create_bucket(Bucket=bucket)
    settings.STORAGES = {
        **settings.STORAGES,
        "memproc_attachments": {
            "BACKEND": "storages.backends.s3.S3Storage",
            "OPTIONS": {
                "bucket_name": bucket,
                "endpoint_url": s3_endpoint,
                "access_key": "testing",
                "secret_key": "testing",
                "region_name": "us-east-1",
                "addressing_style": "path",
                "signature_version": "s3v4",
                "file_overwrite": False,
            },
        },
    }
    client.bucket = bucket
    return client


def bucket_keys(client) -> list[str]:
    listing = client.list_objects_v2(Bucket=client.bucket)
    return sorted(obj["Key"] for obj in listing.get("Contents", ()))
