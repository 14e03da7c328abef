"""Issue 16, item 12: the API's body limits agree with MAX_ATTACHMENT_BYTES.

DESIGN §5: an oversized body or attachment answers 413 (JSON), with the same limit for a data URI in
JSON as for a multipart file. Django's DATA_UPLOAD_MAX_MEMORY_SIZE (2.5 MiB by default, left as the
site set it) must not refuse, with an HTML 400, a JSON body that carries a file memproc accepts: a
file of MAX_ATTACHMENT_BYTES travels as base64 (4/3 of its size) with the rest of the body around it.
Each turn endpoint is driven under WSGI (Django's test client) and ASGI (its async client).
"""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.conf import settings as django_settings
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connections
from django.test import AsyncClient, Client

from memproc import Agent, Memory, models
from memproc.agents import register, unregister
from memproc.api.parsers import MemprocJSONParser
from memproc.exceptions import RequestTooLarge
from memproc.services.attachments import attachment_body_limit
from memproc.testing import ScriptedModel
from tests.factories import ResourceFactory, ThreadFactory

API = "/api/memproc/"
AGENT = "body-limits"
MIB = 1024 * 1024
THREE_MB = 3_000_000


# --- fixtures -------------------------------------------------------------------------------------


@pytest.fixture
def agent(model: ScriptedModel) -> Iterator[Agent]:
    agent = Agent(id=AGENT, instructions="You read files.", model=model, memory=Memory(last_messages=5))
    register(agent, replace=True)
    yield agent
    unregister(AGENT)


@pytest.fixture
def web(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def small_files(settings: Any) -> int:
    """MAX_ATTACHMENT_BYTES of 30,000: the body limit is then about 1 MiB, under Django's 2.5 MiB."""
    settings.MEMPROC = {**settings.MEMPROC, "MAX_ATTACHMENT_BYTES": 30_000}
    return 30_000


def data_uri(data: bytes, media_type: str = "text/plain") -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode('ascii')}"


# Each endpoint's JSON body carrying one inline file, and how to read its answer.


def generate_body(uri: str) -> dict[str, Any]:
    return {
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "read this"},
                    {"type": "file", "data": uri, "media_type": "text/plain", "name": "big.txt"},
                ],
            }
        ],
        "thread_id": "limits",
    }


def chat_body(uri: str) -> dict[str, Any]:
    parts = [
        {"type": "text", "text": "read this"},
        {"type": "file", "url": uri, "mediaType": "text/plain", "filename": "big.txt"},
    ]
    return {"id": "limits", "messages": [{"id": "u1", "role": "user", "parts": parts}]}


def openai_body(uri: str) -> dict[str, Any]:
    content = [
        {"type": "text", "text": "read this"},
        {"type": "file", "file": {"file_data": uri, "filename": "big.txt"}},
    ]
    return {"model": AGENT, "messages": [{"role": "user", "content": content}]}


ENDPOINTS: dict[str, tuple[str, Callable[[str], dict[str, Any]]]] = {
    "generate": (f"agents/{AGENT}/generate/", generate_body),
    "stream": (f"agents/{AGENT}/stream/", generate_body),
    "chat": (f"agents/{AGENT}/chat/", chat_body),
    "openai": ("v1/chat/completions", openai_body),
}


def post_json(client: Client, path: str, body: Any) -> Any:
    raw = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return client.post(API + path, raw, content_type="application/json")


def drain(response: Any) -> bytes:
    if getattr(response, "streaming", False):
        return b"".join(response.streaming_content)
    return response.content


def assert_json_413(response: Any) -> dict[str, Any]:
    assert response.status_code == 413, drain(response)[:300]
    assert response["Content-Type"].startswith("application/json")
    body = response.json()
    error = body.get("error", body)  # the OpenAI protocol wraps memproc's error
    assert error["code"] == "too_large", body
    return body


def nothing_saved(model: ScriptedModel) -> None:
    assert model.calls == 0
    assert not models.Message.objects.exists() and not models.Attachment.objects.exists()


# --- under the limit: a 3 MB file, over Django's 2.5 MiB, under MAX_ATTACHMENT_BYTES ---------------


@pytest.mark.django_db
@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_a_3_mb_data_uri_file_is_accepted_under_wsgi(endpoint, web, agent, model):
    assert django_settings.DATA_UPLOAD_MAX_MEMORY_SIZE == 2_621_440  # the site's setting is untouched
    path, build = ENDPOINTS[endpoint]
    response = post_json(web, path, build(data_uri(b"a" * THREE_MB)))
    drain(response)
    assert response.status_code == 200, response.content[:300] if not response.streaming else endpoint
    attachment = models.Attachment.objects.get()
    assert attachment.size == THREE_MB and model.calls == 1
    user = models.Message.objects.get(role="user")
    assert [p["type"] for p in user.content["parts"]] == ["text", "attachment"]


def run_async(fn: Callable[[], Any]) -> Any:
    try:
        return async_to_sync(fn)()
    finally:
        connections.close_all()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_a_3_mb_data_uri_file_is_accepted_under_asgi(endpoint, user, agent, model):
    path, build = ENDPOINTS[endpoint]
    client = AsyncClient()
    client.force_login(user)
    raw = json.dumps(build(data_uri(b"a" * THREE_MB)))

    async def post() -> tuple[int, str, bytes]:
        response = await client.post(API + path, raw, content_type="application/json")
        if response.streaming:
            content = b"".join([chunk async for chunk in response.streaming_content])
        else:
            content = response.content
        return response.status_code, response["Content-Type"], content

    status, _, content = run_async(post)
    assert status == 200, content[:300]
    assert models.Attachment.objects.get().size == THREE_MB


# --- over the limit: JSON 413, nothing saved --------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_a_data_uri_over_max_attachment_bytes_is_a_413_like_a_multipart_file(
    endpoint, web, agent, model, small_files
):
    path, build = ENDPOINTS[endpoint]
    response = post_json(web, path, build(data_uri(b"a" * (small_files + 1))))
    assert_json_413(response)
    nothing_saved(model)


@pytest.mark.django_db
def test_a_multipart_file_over_max_attachment_bytes_is_the_same_413(web, agent, model, small_files):
    big = SimpleUploadedFile("big.txt", b"a" * (small_files + 1), content_type="text/plain")
    response = web.post(API + f"agents/{AGENT}/generate/", {"messages": "read this", "files": [big]})
    assert_json_413(response)
    nothing_saved(model)


@pytest.mark.django_db
@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_a_file_of_exactly_max_attachment_bytes_passes_in_json(endpoint, web, agent, model, small_files):
    path, build = ENDPOINTS[endpoint]
    response = post_json(web, path, build(data_uri(b"a" * small_files)))
    drain(response)
    assert response.status_code == 200
    assert models.Attachment.objects.get().size == small_files


@pytest.mark.django_db
@pytest.mark.parametrize("size", [1, 3 * MIB], ids=["just-over", "over-djangos-limit-too"])
@pytest.mark.parametrize("endpoint", [*ENDPOINTS, "threads", "thread-update", "working-memory"])
def test_a_body_over_the_limit_is_a_json_413(endpoint, size, web, user, agent, model, small_files):
    ThreadFactory(id="mine", resource=ResourceFactory(id=str(user.pk)))
    limit = attachment_body_limit()
    filler = "x" * (limit + size)
    if endpoint in ENDPOINTS:
        path, build = ENDPOINTS[endpoint]
        body = build(data_uri(b"tiny"))
        body["padding"] = filler
        response = post_json(web, path, body)
    elif endpoint == "threads":
        response = post_json(web, "threads/", {"title": "t", "metadata": {"blob": filler}})
    elif endpoint == "thread-update":
        response = web.patch(
            API + "threads/mine/", json.dumps({"metadata": {"blob": filler}}), content_type="application/json"
        )
    else:
        response = web.put(
            API + "threads/mine/working-memory/",
            json.dumps({"working_memory": filler}),
            content_type="application/json",
        )
    assert_json_413(response)
    nothing_saved(model)
    assert models.Thread.objects.get().metadata == {}


@pytest.mark.django_db
def test_a_thread_body_over_djangos_limit_but_under_memprocs_is_accepted(web, user):
    response = post_json(web, "threads/", {"title": "big", "metadata": {"notes": "n" * THREE_MB}})
    assert response.status_code == 201, response.content[:300]
    assert len(models.Thread.objects.get().metadata["notes"]) == THREE_MB


@pytest.mark.django_db(transaction=True)
def test_a_body_over_the_limit_is_a_json_413_under_asgi(user, agent, model, small_files):
    client = AsyncClient()
    client.force_login(user)
    body = generate_body(data_uri(b"tiny"))
    body["padding"] = "x" * (attachment_body_limit() + 1)

    async def post() -> Any:
        return await client.post(
            API + f"agents/{AGENT}/generate/", json.dumps(body), content_type="application/json"
        )

    response = run_async(post)
    assert_json_413(response)
    nothing_saved(model)


@pytest.mark.django_db
def test_a_text_field_over_djangos_limit_in_a_multipart_form_is_a_json_413(web, agent, model):
    """Django's multipart parser caps the non-file fields at DATA_UPLOAD_MAX_MEMORY_SIZE: files go as
    file parts. Its refusal is memproc's JSON 413, not Django's HTML 400."""
    response = web.post(API + f"agents/{AGENT}/generate/", {"messages": "x" * THREE_MB})
    assert_json_413(response)
    nothing_saved(model)


@pytest.mark.django_db
def test_the_openai_protocol_answers_413_in_its_own_error_shape(web, agent, model, small_files):
    response = post_json(web, "v1/chat/completions", openai_body(data_uri(b"a" * (small_files + 1))))
    error = assert_json_413(response)["error"]
    assert error["type"] == "invalid_request_error" and error["message"]


# --- the parser on its own ------------------------------------------------------------------------


class FakeRequest:
    def __init__(self, length: str | None) -> None:
        self.META = {} if length is None else {"CONTENT_LENGTH": length}
        self._request = self


def test_the_parser_counts_what_it_reads_when_no_length_is_declared(settings):
    settings.MEMPROC = {**settings.MEMPROC, "MAX_ATTACHMENT_BYTES": 3}
    limit = attachment_body_limit()
    body = json.dumps({"padding": "x" * limit}).encode()
    with pytest.raises(RequestTooLarge):
        MemprocJSONParser().parse(io.BytesIO(body), "application/json", {"request": FakeRequest(None)})


def test_the_parser_refuses_a_declared_length_over_the_limit_before_reading(settings):
    settings.MEMPROC = {**settings.MEMPROC, "MAX_ATTACHMENT_BYTES": 3}

    class Unreadable(io.RawIOBase):
        def read(self, size: int = -1) -> bytes:
            raise AssertionError("the body was read")

    length = str(attachment_body_limit() + 1)
    with pytest.raises(RequestTooLarge):
        MemprocJSONParser().parse(Unreadable(), "application/json", {"request": FakeRequest(length)})


def test_the_parser_reads_json_as_drf_does_and_keeps_the_body(settings):
    raw = '{"a": [1, "é"]}'.encode()
    request = FakeRequest(str(len(raw)))
    parsed = MemprocJSONParser().parse(io.BytesIO(raw), "application/json", {"request": request})
    assert parsed == {"a": [1, "é"]}
    assert request._body == raw  # `request.body` still gives the body after the stream was read


@pytest.mark.parametrize("raw", [b'{"a": ', b"\xff\xfe", b'{"a": NaN}'])
def test_bad_json_is_a_parse_error(raw):
    from rest_framework.exceptions import ParseError

    with pytest.raises(ParseError):
        MemprocJSONParser().parse(io.BytesIO(raw), "application/json", {"request": FakeRequest(None)})
