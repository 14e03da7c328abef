"""Issue 16, item 11: an attachment storage that is down answers a JSON 503 and saves nothing.

DESIGN §5: a back end that is down answers 503, never a 500, and no error body carries a secret or an
internal URL. django-storages' S3Storage talks to moto's S3 server; the fault is injected mid-test by
pointing the storage at a closed port (the endpoint went away), or by making one write fail after
another succeeded. Each upload path is covered: a data URI in JSON (generate, stream, the AI SDK's
chat, OpenAI's chat completions), a multipart file, under WSGI and ASGI; and a download URL.
"""

from __future__ import annotations

import base64
import json
import socket
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connections
from django.test import AsyncClient, Client

from memproc import Agent, Memory, models
from memproc.agents import register, unregister
from memproc.exceptions import StorageUnavailable
from memproc.services.attachments import attachment_read, attachment_store, attachment_url
from memproc.testing import ScriptedModel
from tests.attachments.conftest import PDF, R, bucket_keys, file_message, png
from tests.factories import ResourceFactory, UserFactory

pytestmark = [pytest.mark.s3]

API = "/api/memproc/"
AGENT = "s3-outage"
SECRET = "testing-secret-key-CANARY"
PUBLIC = "The file storage is unavailable; try again later."


# --- fixtures -------------------------------------------------------------------------------------


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def s3_storage(s3, settings) -> Callable[..., None]:
    """The attachment storage on moto (one attempt per call, short timeouts), and a switch that points
    it at a closed port: S3 went down. The `s3` client keeps talking to moto, to look at the bucket."""
    from botocore.config import Config

    options = settings.STORAGES["memproc_attachments"]["OPTIONS"]

    def point(endpoint: str) -> None:
        config = Config(
            s3={"addressing_style": "path"},
            signature_version="s3v4",
            retries={"total_max_attempts": 1, "mode": "standard"},
            connect_timeout=2,
            read_timeout=5,
        )
        backend = {
            "BACKEND": "storages.backends.s3.S3Storage",
            "OPTIONS": {**options, "endpoint_url": endpoint, "secret_key": SECRET, "client_config": config},
        }
        settings.STORAGES = {**settings.STORAGES, "memproc_attachments": backend}

    point(options["endpoint_url"])
    point.down = lambda: point(f"http://127.0.0.1:{closed_port()}")  # type: ignore[attr-defined]
    point.endpoint = options["endpoint_url"]  # type: ignore[attr-defined]
    return point


@pytest.fixture
def down(s3_storage) -> Callable[[], None]:
    return s3_storage.down


@pytest.fixture
def agent(model: ScriptedModel) -> Iterator[Agent]:
    agent = Agent(id=AGENT, instructions="You look at files.", model=model, memory=Memory(last_messages=5))
    register(agent, replace=True)
    yield agent
    unregister(AGENT)


@pytest.fixture
def user(db: None) -> Any:
    user = UserFactory()
    ResourceFactory(id=str(user.pk))
    return user


@pytest.fixture
def web(user: Any) -> Client:
    client = Client(raise_request_exception=False)  # an unhandled error is the 500 a caller would see
    client.force_login(user)
    return client


def data_uri(data: bytes, media_type: str = "image/png") -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode('ascii')}"


def generate_body(uri: str) -> dict[str, Any]:
    parts = [{"type": "text", "text": "look"}, {"type": "file", "data": uri, "media_type": "image/png"}]
    return {"messages": [{"role": "user", "content": parts}], "thread_id": "pics"}


def chat_body(uri: str) -> dict[str, Any]:
    parts = [{"type": "text", "text": "look"}, {"type": "file", "url": uri, "mediaType": "image/png"}]
    return {"id": "pics", "messages": [{"id": "u1", "role": "user", "parts": parts}]}


def openai_body(uri: str) -> dict[str, Any]:
    content = [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": uri}}]
    return {
        "model": AGENT,
        "messages": [{"role": "user", "content": content}],
        "metadata": {"thread_id": "pics"},
    }


ENDPOINTS: dict[str, tuple[str, Callable[[str], dict[str, Any]]]] = {
    "generate": (f"agents/{AGENT}/generate/", generate_body),
    "stream": (f"agents/{AGENT}/stream/", generate_body),
    "chat": (f"agents/{AGENT}/chat/", chat_body),
    "openai": ("v1/chat/completions", openai_body),
}


def assert_json_503(status: int, content_type: str, content: bytes, s3_endpoint: str) -> dict[str, Any]:
    assert status == 503, content[:500]
    assert content_type.startswith("application/json")
    text = content.decode()
    for leak in (s3_endpoint, "127.0.0.1", "http://", SECRET, "memproc-test", "Traceback", "botocore"):
        assert leak not in text, f"{leak!r} leaked in {text}"
    body = json.loads(text)
    error = body.get("error", body)  # the OpenAI protocol's shape
    assert error["code"] == "storage_unavailable"
    assert (error.get("detail") or error.get("message")) == PUBLIC
    return body


def nothing_saved(model: ScriptedModel) -> None:
    assert model.calls == 0
    assert not models.Message.objects.exists() and not models.Attachment.objects.exists()
    assert not models.Thread.objects.filter(public_id="pics").exists()


# --- uploads while S3 is down ---------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_a_data_uri_upload_while_s3_is_down_is_a_json_503(endpoint, web, agent, model, s3, s3_storage):
    path, build = ENDPOINTS[endpoint]
    s3_storage.down()
    response = web.post(API + path, json.dumps(build(data_uri(png()))), content_type="application/json")
    assert_json_503(response.status_code, response["Content-Type"], response.content, s3_storage.endpoint)
    nothing_saved(model)
    assert bucket_keys(s3) == []


@pytest.mark.django_db
@pytest.mark.parametrize("endpoint", ["generate", "stream"])
def test_a_multipart_upload_while_s3_is_down_is_a_json_503(endpoint, web, agent, model, s3, s3_storage):
    s3_storage.down()
    upload = SimpleUploadedFile("dot.png", png(), content_type="image/png")
    response = web.post(
        API + f"agents/{AGENT}/{endpoint}/", {"messages": "look", "thread_id": "pics", "files": [upload]}
    )
    assert_json_503(response.status_code, response["Content-Type"], response.content, s3_storage.endpoint)
    nothing_saved(model)
    assert bucket_keys(s3) == []


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_an_upload_while_s3_is_down_is_a_json_503_under_asgi(endpoint, user, agent, model, s3, s3_storage):
    path, build = ENDPOINTS[endpoint]
    client = AsyncClient(raise_request_exception=False)
    client.force_login(user)
    s3_storage.down()

    async def post() -> tuple[int, str, bytes]:
        response = await client.post(
            API + path, json.dumps(build(data_uri(png()))), content_type="application/json"
        )
        if response.streaming:
            content = b"".join([chunk async for chunk in response.streaming_content])
        else:
            content = response.content
        return response.status_code, response["Content-Type"], content

    try:
        status, content_type, content = async_to_sync(post)()
    finally:
        connections.close_all()
    assert_json_503(status, content_type, content, s3_storage.endpoint)
    nothing_saved(model)
    assert bucket_keys(s3) == []


# --- a write that fails after others succeeded ----------------------------------------------------


def failing_save_after(count: int, error: Callable[[], Exception], *, wrote: bool = False):
    """S3Storage._save that works `count` times, then raises `error()` (after writing, with `wrote`:
    the object is stored but the answer is lost)."""
    from storages.backends.s3 import S3Storage

    real = S3Storage._save
    calls: list[str] = []

    def _save(self: Any, name: str, content: Any) -> str:
        calls.append(name)
        if len(calls) <= count:
            return real(self, name, content)
        if wrote:
            real(self, name, content)
        raise error()

    return _save


def connection_error() -> Exception:
    from botocore.exceptions import EndpointConnectionError

    return EndpointConnectionError(endpoint_url="http://127.0.0.1:1/memproc-test/secret-key")


def server_error() -> Exception:
    from botocore.exceptions import ClientError

    response = {"Error": {"Code": "InternalError", "Message": "We encountered an internal error"}}
    response["ResponseMetadata"] = {"HTTPStatusCode": 500}
    return ClientError(response, "PutObject")


def read_timeout() -> Exception:
    from botocore.exceptions import ReadTimeoutError

    return ReadTimeoutError(endpoint_url="http://127.0.0.1:1/memproc-test")


@pytest.mark.django_db
@pytest.mark.parametrize("error", [connection_error, server_error, read_timeout, lambda: OSError("disk")])
def test_a_second_file_that_fails_leaves_neither_files_nor_rows(
    error, web, agent, model, s3, s3_storage, monkeypatch
):
    from storages.backends.s3 import S3Storage

    monkeypatch.setattr(S3Storage, "_save", failing_save_after(1, error))
    parts = [
        {"type": "text", "text": "two files"},
        {"type": "file", "data": data_uri(png(rgb=(1, 2, 3))), "media_type": "image/png"},
        {"type": "file", "data": data_uri(PDF, "application/pdf"), "media_type": "application/pdf"},
    ]
    body = {"messages": [{"role": "user", "content": parts}], "thread_id": "pics"}
    response = web.post(API + f"agents/{AGENT}/generate/", json.dumps(body), content_type="application/json")
    assert_json_503(response.status_code, response["Content-Type"], response.content, s3_storage.endpoint)
    nothing_saved(model)
    assert bucket_keys(s3) == []  # the first file, stored before the failure, was deleted


@pytest.mark.django_db
def test_a_write_whose_answer_is_lost_leaves_no_object(web, agent, model, s3, s3_storage, monkeypatch):
    from storages.backends.s3 import S3Storage

    monkeypatch.setattr(S3Storage, "_save", failing_save_after(0, read_timeout, wrote=True))
    response = web.post(
        API + f"agents/{AGENT}/generate/",
        json.dumps(generate_body(data_uri(png()))),
        content_type="application/json",
    )
    assert_json_503(response.status_code, response["Content-Type"], response.content, s3_storage.endpoint)
    nothing_saved(model)
    assert bucket_keys(s3) == []


@pytest.mark.django_db
def test_a_partly_written_file_on_disk_is_removed(web, agent, model, fs_storage, monkeypatch):
    """FileSystemStorage leaves what it wrote when a write fails midway (a full disk)."""
    from django.core.files.storage import FileSystemStorage

    real = FileSystemStorage._save

    def _save(self: Any, name: str, content: Any) -> str:
        saved = real(self, name, content)
        with open(self.path(saved), "r+b") as handle:
            handle.truncate(3)
        raise OSError(28, "No space left on device", self.path(saved))

    monkeypatch.setattr(FileSystemStorage, "_save", _save)
    response = web.post(
        API + f"agents/{AGENT}/generate/",
        json.dumps(generate_body(data_uri(png()))),
        content_type="application/json",
    )
    assert_json_503(response.status_code, response["Content-Type"], response.content, str(fs_storage))
    nothing_saved(model)
    assert not [p for p in fs_storage.rglob("*") if p.is_file()]


# --- downloads and reads of an attachment stored before S3 went down --------------------------------


@pytest.fixture
def stored_attachment(user, s3, s3_storage) -> models.Attachment:
    attachment = attachment_store(
        resource_id=str(user.pk), data=PDF, name="r.pdf", content_type="application/pdf"
    )
    assert bucket_keys(s3) == [attachment.file.name]
    return attachment


@pytest.mark.django_db
def test_a_download_url_needs_no_round_trip_to_s3(web, stored_attachment, s3_storage):
    """S3 signs URLs locally: the metadata and a signed URL are still served while S3 is down."""
    s3_storage.down()
    response = web.get(API + f"attachments/{stored_attachment.pk}/")
    assert response.status_code == 200, response.content
    assert response.json()["url"].startswith("http://127.0.0.1:")


@pytest.mark.django_db
def test_a_storage_that_cannot_sign_a_url_is_a_json_503(web, stored_attachment, s3_storage, monkeypatch):
    """A storage whose URLs need the network (a signing service, a token endpoint) that is down."""
    from storages.backends.s3 import S3Storage

    def url(self: Any, name: str, parameters: Any = None, expire: Any = None, http_method: Any = None) -> str:
        raise connection_error()

    monkeypatch.setattr(S3Storage, "url", url)
    response = web.get(API + f"attachments/{stored_attachment.pk}/")
    assert_json_503(response.status_code, response["Content-Type"], response.content, s3_storage.endpoint)


@pytest.mark.django_db
def test_the_services_raise_storage_unavailable_while_s3_is_down(user, stored_attachment, s3_storage):
    s3_storage.down()
    row = models.Attachment.objects.get(pk=stored_attachment.pk)
    with pytest.raises(StorageUnavailable) as caught:
        attachment_read(attachment=row)
    assert caught.value.public_message == PUBLIC
    with pytest.raises(StorageUnavailable):
        attachment_store(resource_id=str(user.pk), data=png(), name="p.png", content_type="image/png")
    assert attachment_url(attachment=row).startswith("http://127.0.0.1:")


@pytest.mark.django_db
def test_a_turn_whose_history_file_cannot_be_read_still_answers(make_agent, model, s3, s3_storage):
    # (`make_agent` and `model` are tests/attachments' committing agent and scripted model.)
    """Prompt time reads degrade (the model sees a placeholder), as before: only writes answer 503."""
    agent = make_agent()
    model.add("first", "second")
    agent.generate(file_message(png()), thread_id="t", resource_id=R)
    s3_storage.down()
    result = agent.generate("and now?", thread_id="t", resource_id=R)
    assert result.text == "second"
