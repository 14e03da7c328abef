"""Back ends that accept connections and never answer (finding 7 of the third hostile review): S3, the
model provider and the embedder. Each turn or read answers within the time its timeouts allow, with the
error a caller expects (503 for the storage, 502 for the model, a fail-open recall for the embedder);
nothing is lost, nothing runs twice, and a request stuck on S3 does not hold the admission permit
other users' requests need.

The bounds on elapsed time are generous (a busy two-core machine): they tell a bounded wait from the
minutes botocore's and the SDKs' defaults allow, not a fast machine from a slow one."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import ThreadSensitiveContext
from django.db import connections
from django.test import AsyncClient, Client

from memproc import Agent, Memory, models
from memproc.agents import register, unregister
from memproc.embedders.openai import OpenAIEmbedder
from memproc.models import OutboxJob
from memproc.testing import ScriptedModel
from tests.attachments.conftest import PDF, png
from tests.factories import MessageFactory, ResourceFactory, ThreadFactory, UserFactory

API = "/api/memproc/"
AGENT = "black-hole-backends"
# What the demo settings give botocore, scaled down so a test takes seconds: one retry, short waits.
S3_CONNECT_TIMEOUT, S3_READ_TIMEOUT, S3_ATTEMPTS = 1, 2, 2


def elapsed_since(started: float) -> float:
    return time.monotonic() - started


def data_uri(data: bytes, media_type: str = "image/png") -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode('ascii')}"


def upload_body(thread_id: str = "pics") -> str:
    parts = [{"type": "text", "text": "look"}, {"type": "file", "data": data_uri(png())}]
    return json.dumps({"messages": [{"role": "user", "content": parts}], "thread_id": thread_id})


@pytest.fixture
def model() -> ScriptedModel:
    return ScriptedModel([f"answer {i}" for i in range(20)])


@pytest.fixture
def agent(model: ScriptedModel) -> Iterator[Agent]:
    agent = register(
        Agent(id=AGENT, instructions="You look at files.", model=model, memory=Memory(last_messages=5)),
        replace=True,
    )
    yield agent
    unregister(AGENT)


def s3_on(black_hole: Any, settings: Any, *, read_timeout: float, attempts: int) -> None:
    """Makes the attachment storage django-storages' S3Storage on the black hole."""
    from botocore.config import Config

    host, port = black_hole
    config = Config(
        connect_timeout=S3_CONNECT_TIMEOUT,
        read_timeout=read_timeout,
        retries={"total_max_attempts": attempts, "mode": "standard"},
        s3={"addressing_style": "path"},
        signature_version="s3v4",
    )
    settings.STORAGES = {
        **settings.STORAGES,
        "memproc_attachments": {
            "BACKEND": "storages.backends.s3.S3Storage",
            "OPTIONS": {
                "bucket_name": "memproc-black-hole",
                "endpoint_url": f"http://{host}:{port}",
                "access_key": "testing",
                "secret_key": "testing",
                "region_name": "us-east-1",
                "client_config": config,
            },
        },
    }


@pytest.fixture
def black_hole_s3(black_hole: Any, settings: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The attachment storage on the black hole, with short timeouts and one retry."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    s3_on(black_hole, settings, read_timeout=S3_READ_TIMEOUT, attempts=S3_ATTEMPTS)
    return black_hole


# One storage call waits at most this long; an upload that fails makes two (the write, then the delete
# of whatever the write may have left).
S3_CALL_BOUND = S3_ATTEMPTS * (S3_CONNECT_TIMEOUT + S3_READ_TIMEOUT)


def assert_storage_503(response: Any) -> None:
    assert response.status_code == 503, response.content[:500]
    body = response.json()
    assert body["code"] == "storage_unavailable"
    assert "127.0.0.1" not in json.dumps(body)


def owner(name: str) -> Any:
    user = UserFactory(username=name)
    ResourceFactory(id=str(user.pk))
    return user


# --- S3 ---------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_an_upload_turn_on_a_silent_s3_answers_503_within_its_timeouts(
    black_hole_s3: Any, agent: Agent, model: ScriptedModel
) -> None:
    web = Client(raise_request_exception=False)
    web.force_login(owner("uploader"))
    started = time.monotonic()
    response = web.post(API + f"agents/{AGENT}/generate/", upload_body(), content_type="application/json")
    elapsed = elapsed_since(started)

    assert_storage_503(response)
    assert elapsed < 2 * S3_CALL_BOUND + 10, f"the upload waited {elapsed:.1f} s for S3"
    assert model.calls == 0  # the turn stopped before its model: nothing to run twice on a retry
    assert not models.Message.objects.exists() and not models.Attachment.objects.exists()
    assert not models.Thread.objects.filter(public_id="pics").exists()


@pytest.mark.django_db
def test_a_download_from_a_silent_s3_answers_503_within_its_timeouts(black_hole_s3: Any) -> None:
    user = owner("reader")
    attachment = models.Attachment.objects.create(
        resource_id=str(user.pk), file="a/b.pdf", name="r.pdf", content_type="application/pdf", size=len(PDF)
    )
    web = Client(raise_request_exception=False)
    web.force_login(user)
    started = time.monotonic()
    response = web.get(API + f"attachments/{attachment.pk}/download/")
    elapsed = elapsed_since(started)

    assert_storage_503(response)
    assert elapsed < S3_CALL_BOUND + 10, f"the download waited {elapsed:.1f} s for S3"
    assert models.Attachment.objects.filter(pk=attachment.pk).exists()  # a failed read deletes nothing


@pytest.mark.django_db(transaction=True)
def test_an_upload_stuck_on_s3_does_not_hold_the_admission_permit(
    black_hole_s3: Any, agent: Agent, model: ScriptedModel, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With one permit per process, another user's thread read is served while an upload waits on S3:
    the upload gives its permit (and its connection) back for the storage call."""
    from memproc import admission

    # One attempt that waits long enough to tell "served while the write waits" from "served after".
    s3_on(black_hole_s3, settings, read_timeout=5, attempts=1)
    settings.MEMPROC = {**getattr(settings, "MEMPROC", {}), "ASYNC_THREADS": 1}
    monkeypatch.setattr(admission, "_permits", None)
    uploader, reader = owner("uploader"), owner("reader")
    thread = ThreadFactory(id="notes", resource=models.Resource.objects.get(pk=str(reader.pk)))
    MessageFactory(thread=thread, text="a note")
    upload_client, read_client = AsyncClient(raise_request_exception=False), AsyncClient()
    upload_client.force_login(uploader)
    read_client.force_login(reader)

    async def upload() -> Any:
        async with ThreadSensitiveContext():  # a thread of its own, as under a real ASGI server
            return await upload_client.post(
                API + f"agents/{AGENT}/generate/", upload_body(), content_type="application/json"
            )

    async def read() -> Any:
        async with ThreadSensitiveContext():
            return await read_client.get(API + "threads/notes/messages/")

    async def both() -> tuple[Any, Any, bool, float]:
        stuck = asyncio.ensure_future(upload())
        deadline = time.monotonic() + 10
        while not black_hole_s3.accepted:  # the upload is now waiting on S3
            assert time.monotonic() < deadline and not stuck.done(), "the upload never reached S3"
            await asyncio.sleep(0.02)
        started = time.monotonic()
        served = await asyncio.wait_for(read(), timeout=30)
        read_elapsed, write_still_waiting = elapsed_since(started), black_hole_s3.accepted == 1
        return await stuck, served, write_still_waiting, read_elapsed

    try:  # an event loop of its own: under async_to_sync both requests would share this thread
        uploaded, served, write_still_waiting, read_elapsed = asyncio.run(both())
    finally:
        connections.close_all()
    assert served.status_code == 200, served.content[:500]
    (note,) = served.json()["results"]
    assert "a note" in json.dumps(note)
    # Served while the upload's write still waited on S3 (no second connection yet: its delete).
    assert write_still_waiting, f"the read waited {read_elapsed:.1f} s, until the write gave up on S3"
    assert_storage_503(uploaded)
    assert model.calls == 0
    assert models.Message.objects.count() == 1 and not models.Attachment.objects.exists()


# --- the model provider -----------------------------------------------------------------------------

MODEL_TIMEOUT, MODEL_RETRIES = 1.0, 1


@pytest.fixture
def silent_model(black_hole: Any, settings: Any) -> Iterator[Agent]:
    host, port = black_hole
    settings.MEMPROC = {
        **getattr(settings, "MEMPROC", {}),
        "MODELS": {
            "openai": {
                "api_key": "sk-black-hole",
                "base_url": f"http://{host}:{port}/v1",
                "timeout": MODEL_TIMEOUT,
                "max_retries": MODEL_RETRIES,
            }
        },
    }
    agent = register(
        Agent(id=AGENT, model="openai/gpt-4o-mini", memory=Memory(last_messages=5)), replace=True
    )
    yield agent
    unregister(AGENT)


@pytest.mark.django_db
@pytest.mark.parametrize("endpoint", ["generate", "stream"])
def test_a_silent_model_ends_the_turn_with_a_502_within_its_timeout(
    endpoint: str, silent_model: Agent, black_hole: Any
) -> None:
    web = Client(raise_request_exception=False)
    web.force_login(owner("asker"))
    started = time.monotonic()
    response = web.post(
        API + f"agents/{AGENT}/{endpoint}/",
        {"messages": "are you there?", "thread_id": "silent"},
        content_type="application/json",
    )
    body = b"".join(response.streaming_content) if response.streaming else response.content
    elapsed = elapsed_since(started)

    # One try and MODEL_RETRIES retries, each cut at MODEL_TIMEOUT, with the SDK's short backoff.
    bound = (MODEL_RETRIES + 1) * MODEL_TIMEOUT + 10
    assert elapsed < bound, f"the turn waited {elapsed:.1f} s for a model that never answers"
    if endpoint == "generate":
        assert response.status_code == 502, body[:500]
        assert response.json()["code"] == "model_unavailable"
    else:
        assert b"model_unavailable" in body and b"127.0.0.1" not in body
    assert black_hole.accepted == MODEL_RETRIES + 1  # bounded retries, no storm
    assert not models.Message.objects.filter(thread__public_id="silent").exists()


# --- the embedder -----------------------------------------------------------------------------------

EMBEDDER_TIMEOUT = 1.0


@pytest.mark.django_db(transaction=True)
def test_a_silent_embedder_fails_open_and_parks_its_job_in_the_outbox(black_hole: Any, settings: Any) -> None:
    host, port = black_hole
    settings.MEMPROC = {**getattr(settings, "MEMPROC", {}), "BACKGROUND": "inline"}
    embedder = OpenAIEmbedder(
        base_url=f"http://{host}:{port}/v1", api_key="sk-black-hole", dimensions=16, timeout=EMBEDDER_TIMEOUT
    )
    agent = register(
        Agent(
            id=AGENT,
            model="local/echo",
            memory=Memory(last_messages=4, semantic_recall=True, embedder=embedder),
        ),
        replace=True,
    )
    try:
        started = time.monotonic()
        result = agent.generate("I keep bees", thread_id="bees", resource_id="bee-keeper")
        elapsed = elapsed_since(started)
    finally:
        unregister(AGENT)

    assert result.text
    # At most two embedder calls (the recall query, the job after commit), each cut at its timeout.
    assert elapsed < 2 * EMBEDDER_TIMEOUT + 10, f"the turn waited {elapsed:.1f} s for the embedder"
    assert 1 <= black_hole.accepted <= 2  # the embedder does not retry on its own
    stored = models.Message.objects.filter(thread__public_id="bees")
    assert sorted(stored.values_list("role", flat=True)) == ["assistant", "user"]
    (job,) = OutboxJob.objects.all()  # parked once, for a later retry
    assert job.task == "memproc.embed_messages" and job.attempts >= 1
    assert not models.MessageEmbedding.objects.exists()
