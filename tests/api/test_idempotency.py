"""`Idempotency-Key` on `generate/` and `stream/`: a repeat replays the first turn's answer and runs
no second turn; another body is a 422, a repeat during the first a 409; keys are per caller and
endpoint, expire, and a failed turn releases its key. Under WSGI and ASGI, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connections
from django.test import AsyncClient
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from memproc import models
from memproc.events import StreamEvent
from memproc.exceptions import ModelUnavailableError
from memproc.llm.types import ModelRequest, ModelResponse, ToolCall
from memproc.services.purge import expired_purge
from memproc.testing import ScriptedModel
from memproc.tools import tool
from tests.api.conftest import API, client_for, stream_and_leave

GENERATE = API + "agents/api-test/generate/"
STREAM = API + "agents/api-test/stream/"
REPLAYED = "Idempotent-Replayed"


def post(client: Any, url: str, body: Any, key: str | None = "key-1", **extra: Any) -> Any:
    if key is not None:
        extra["HTTP_IDEMPOTENCY_KEY"] = key
    return client.post(url, body, format="json", **extra)


def parse_sse(raw: bytes) -> list[tuple[str, Any]]:
    events = []
    for block in raw.decode().split("\n\n"):
        if block.strip():
            fields = dict(line.split(": ", 1) for line in block.splitlines())
            events.append((fields["event"], json.loads(fields["data"])))
    return events


def streamed(response: Any) -> list[tuple[str, Any]]:
    return parse_sse(b"".join(response.streaming_content))


def text_of(events: list[tuple[str, Any]]) -> str:
    return "".join(data["text"] for kind, data in events if kind == "text-delta")


# --- generate/ ----------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_repeat_replays_the_first_answer_and_runs_no_second_turn(owner_client, agent, model, resource):
    model.add("First answer", "A second turn that must not happen")
    body = {"messages": "hello", "thread_id": "t-idem"}
    first = post(owner_client, GENERATE, body)
    again = post(owner_client, GENERATE, body)
    assert first.status_code == again.status_code == 200
    assert again.json() == first.json() and again.json()["text"] == "First answer"
    assert again[REPLAYED] == "true" and REPLAYED not in first
    assert model.calls == 1
    assert models.Message.objects.count() == 2 and models.TurnRecord.objects.count() == 1


@pytest.mark.django_db
def test_key_order_and_spacing_of_the_json_body_do_not_make_another_body(
    owner_client, agent, model, resource
):
    model.add("Once")
    first = owner_client.post(
        GENERATE,
        '{"messages": "hello", "thread_id": "t-order"}',
        content_type="application/json",
        HTTP_IDEMPOTENCY_KEY="k",
    )
    again = owner_client.post(
        GENERATE,
        '{"thread_id":"t-order","messages":"hello"}',
        content_type="application/json",
        HTTP_IDEMPOTENCY_KEY="k",
    )
    assert first.status_code == again.status_code == 200 and again[REPLAYED] == "true"
    assert model.calls == 1


@pytest.mark.django_db
def test_another_body_with_the_same_key_is_a_422(owner_client, agent, model, resource):
    model.add("First answer")
    assert post(owner_client, GENERATE, {"messages": "hello"}).status_code == 200
    response = post(owner_client, GENERATE, {"messages": "something else"})
    assert response.status_code == 422
    assert (
        response.json()["code"] == "idempotency_key_reused" and "Idempotency-Key" in response.json()["detail"]
    )
    assert model.calls == 1 and models.Message.objects.count() == 2


@pytest.mark.django_db
def test_a_repeat_while_the_first_runs_is_a_409(owner_client, agent, model, resource, user):
    model.add("Never")
    models.IdempotencyRecord.objects.create(
        scope=f"agents/api-test/generate user:{user.pk}",
        key="key-1",
        request_hash=_hash_of({"messages": "hello"}),
        expires_at=timezone.now() + timedelta(hours=1),
    )
    response = post(owner_client, GENERATE, {"messages": "hello"})
    assert response.status_code == 409, response.content
    assert response.json()["code"] == "idempotency_key_in_progress" and response["Retry-After"] == "1"
    assert model.calls == 0 and not models.Message.objects.exists()


def test_a_first_request_that_died_mid_turn_is_taken_over_after_the_lease(
    owner_client, agent, model, resource, user, settings
):
    settings.MEMPROC = {**settings.MEMPROC, "IDEMPOTENCY_LEASE": 120}
    model.add("Taken over")
    models.IdempotencyRecord.objects.create(
        scope=f"agents/api-test/generate user:{user.pk}",
        key="key-1",
        request_hash=_hash_of({"messages": "hello"}),
        created_at=timezone.now() - timedelta(seconds=121),
        expires_at=timezone.now() + timedelta(hours=1),
    )
    response = post(owner_client, GENERATE, {"messages": "hello"})
    assert response.status_code == 200, response.content
    assert response.json()["text"] == "Taken over" and model.calls == 1
    assert models.IdempotencyRecord.objects.get().state == models.IdempotencyRecord.State.DONE


def _running_record(user: Any, **owner: Any) -> None:
    """A first request that claimed key-1 a moment ago and runs (or ran) in the process `owner` names."""
    models.IdempotencyRecord.objects.create(
        scope=f"agents/api-test/generate user:{user.pk}",
        key="key-1",
        request_hash=_hash_of({"messages": "hello"}),
        expires_at=timezone.now() + timedelta(hours=1),
        **owner,
    )


def _gone_pid() -> int:
    """The pid of a process of this host that has exited (and been reaped)."""
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


@pytest.mark.django_db
def test_a_first_request_whose_process_is_gone_from_this_host_is_taken_over_at_once(
    owner_client, agent, model, resource, user
):
    from memproc.api.claim_owner import this_process

    me = this_process()
    model.add("Taken over at once")
    _running_record(user, owner_host=me.host, owner_pid=_gone_pid(), owner_started=me.started)
    response = post(owner_client, GENERATE, {"messages": "hello"})
    assert response.status_code == 200, response.content
    assert response.json()["text"] == "Taken over at once" and model.calls == 1
    record = models.IdempotencyRecord.objects.get()
    assert record.state == models.IdempotencyRecord.State.DONE and record.owner_pid == me.pid


@pytest.mark.django_db
def test_a_reused_pid_is_not_the_first_requests_process(owner_client, agent, model, resource, user):
    from memproc.api.claim_owner import this_process

    me = this_process()
    if me.started is None:
        pytest.skip("this platform does not tell when a process started")
    model.add("Taken over")
    _running_record(user, owner_host=me.host, owner_pid=me.pid, owner_started=me.started - 1)
    response = post(owner_client, GENERATE, {"messages": "hello"})
    assert response.status_code == 200, response.content
    assert model.calls == 1


@pytest.mark.django_db
def test_a_first_request_whose_process_lives_is_a_409(owner_client, agent, model, resource, user):
    from memproc.api.claim_owner import this_process

    me = this_process()
    model.add("Never")
    _running_record(user, owner_host=me.host, owner_pid=me.pid, owner_started=me.started)
    response = post(owner_client, GENERATE, {"messages": "hello"})
    assert response.status_code == 409, response.content
    assert model.calls == 0 and not models.Message.objects.exists()


@pytest.mark.django_db
def test_a_first_request_on_another_host_waits_for_the_lease(owner_client, agent, model, resource, user):
    from memproc.api.claim_owner import this_process

    model.add("Never")
    _running_record(
        user, owner_host="another-host", owner_pid=_gone_pid(), owner_started=this_process().started
    )
    response = post(owner_client, GENERATE, {"messages": "hello"})
    assert response.status_code == 409, response.content
    assert model.calls == 0


def _hash_of(body: dict[str, Any]) -> str:
    import hashlib

    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


@pytest.mark.django_db
def test_keys_are_per_caller(agent, model, user, other_user, resource, other_resource):
    model.add("For the owner", "For the other user")
    mine = post(client_for(user), GENERATE, {"messages": "hello"})
    theirs = post(client_for(other_user), GENERATE, {"messages": "hello"})
    assert mine.json()["text"] == "For the owner" and theirs.json()["text"] == "For the other user"
    assert REPLAYED not in theirs and theirs.json()["resource_id"] == str(other_user.pk)
    assert model.calls == 2 and models.IdempotencyRecord.objects.count() == 2


@pytest.mark.django_db
def test_keys_are_per_endpoint(owner_client, agent, model, resource):
    model.add("Generated", "Streamed")
    assert post(owner_client, GENERATE, {"messages": "hello"}).json()["text"] == "Generated"
    kind, data = streamed(post(owner_client, STREAM, {"messages": "hello"}))[-1]
    assert kind == "finish" and data["text"] == "Streamed"
    assert model.calls == 2


@pytest.mark.django_db
@pytest.mark.parametrize(
    "failure, status",
    [(ModelUnavailableError("down"), 502), (AssertionError("a bug in a processor"), None)],
)
def test_a_failed_turn_releases_its_key(owner_client, agent, model, resource, failure, status):
    model.add(failure, "Second try works")
    if status is None:
        with pytest.raises(AssertionError):
            post(owner_client, GENERATE, {"messages": "hello"})
    else:
        assert post(owner_client, GENERATE, {"messages": "hello"}).status_code == status
    assert not models.IdempotencyRecord.objects.exists()
    retry = post(owner_client, GENERATE, {"messages": "hello"})
    assert retry.status_code == 200 and retry.json()["text"] == "Second try works" and REPLAYED not in retry


@pytest.mark.django_db
def test_a_refused_request_is_not_kept(owner_client, agent, model, resource):
    assert post(owner_client, GENERATE, {"messages": []}).status_code == 400
    assert not models.IdempotencyRecord.objects.exists()


@pytest.mark.django_db
def test_a_blocked_turn_is_an_answer_and_is_replayed(owner_client, agent, model, resource):
    body = {"messages": "a forbidden word"}
    first = post(owner_client, GENERATE, body)
    again = post(owner_client, GENERATE, body)
    assert first.json()["tripwire"]["processor_id"] == "block-word"
    assert again.json() == first.json() and again[REPLAYED] == "true"
    assert models.TripwireLog.objects.count() == 1


KEYS_REFUSED = ["x" * 256, "caf\u00e9", "tab\there", "", " ", " padded", "padded ", "line\n"]
KEYS_TAKEN = ["k", "x" * 255, "order 17/retry #2", "~!{}"]


@pytest.mark.django_db
@pytest.mark.parametrize("key", KEYS_REFUSED)
def test_a_malformed_key_is_a_400(owner_client, agent, model, resource, key):
    response = owner_client.post(
        GENERATE, {"messages": "hello"}, format="json", HTTP_IDEMPOTENCY_KEY=key.encode().decode("latin-1")
    )
    assert response.status_code == 400 and response.json()["code"] == "idempotency_key_invalid"
    assert model.calls == 0


@pytest.mark.django_db
def test_the_schema_states_the_rule_for_keys(api_client):
    """What the OpenAPI document says of the header is what the server takes: clients generated from
    it (and the schema fuzzing) send only keys that are accepted."""
    document = api_client.get(API + "schema/", {"format": "json"}).json()
    header = next(
        p
        for p in document["paths"]["/api/memproc/agents/{id}/generate/"]["post"]["parameters"]
        if p["name"] == "Idempotency-Key"
    )
    # ECMA's `$` is the end of the text; Python's also matches before a final newline.
    pattern = re.compile(header["schema"]["pattern"].removeprefix("^").removesuffix("$"))
    assert [k for k in KEYS_TAKEN if pattern.fullmatch(k)] == KEYS_TAKEN
    assert [k for k in KEYS_REFUSED if pattern.fullmatch(k)] == []


@pytest.mark.django_db
@pytest.mark.parametrize("key", KEYS_TAKEN)
def test_a_well_formed_key_is_taken(owner_client, agent, model, resource, key):
    model.add("Hi")
    response = owner_client.post(GENERATE, {"messages": "hello"}, format="json", HTTP_IDEMPOTENCY_KEY=key)
    assert response.status_code == 200 and model.calls == 1


@pytest.mark.django_db
def test_a_key_expires_after_the_ttl(owner_client, agent, model, resource, settings):
    settings.MEMPROC = {**settings.MEMPROC, "IDEMPOTENCY_TTL": 60}
    model.add("First", "After expiry")
    post(owner_client, GENERATE, {"messages": "hello"})
    record = models.IdempotencyRecord.objects.get()
    assert timedelta(seconds=59) < record.expires_at - record.created_at <= timedelta(seconds=60)
    models.IdempotencyRecord.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    again = post(owner_client, GENERATE, {"messages": "hello"})
    assert again.json()["text"] == "After expiry" and REPLAYED not in again
    assert models.IdempotencyRecord.objects.count() == 1


@pytest.mark.django_db
def test_the_retention_purge_deletes_expired_keys_only(owner_client, agent, model, resource):
    model.add("One", "Two")
    post(owner_client, GENERATE, {"messages": "hello"}, key="old")
    post(owner_client, GENERATE, {"messages": "hello"}, key="new")
    models.IdempotencyRecord.objects.filter(key="old").update(
        expires_at=timezone.now() - timedelta(minutes=1)
    )
    expired_purge(dry_run=True)
    assert models.IdempotencyRecord.objects.count() == 2  # a dry run deletes nothing
    expired_purge()
    assert list(models.IdempotencyRecord.objects.values_list("key", flat=True)) == ["new"]


@pytest.mark.django_db
def test_without_the_header_nothing_is_recorded_and_no_query_is_added(
    owner_client, agent, model, resource, memproc_connection
):
    model.add("One")
    with CaptureQueriesContext(memproc_connection) as queries:
        assert post(owner_client, GENERATE, {"messages": "hello"}, key=None).status_code == 200
    assert not [q for q in queries if "idempotency" in q["sql"].lower()]
    assert not models.IdempotencyRecord.objects.exists()


@pytest.mark.django_db
def test_multipart_repeats_compare_the_files(agent, model, user, resource):
    client = client_for(user)
    model.add("Nice picture.", "Another picture.")

    def send(content: bytes) -> Any:
        return client.post(
            GENERATE,
            {
                "messages": "What is this?",
                "files": [SimpleUploadedFile("a.txt", content, content_type="text/plain")],
            },
            HTTP_IDEMPOTENCY_KEY="upload-1",
        )

    first = send(b"one")
    again = send(b"one")
    assert first.status_code == 200 and again[REPLAYED] == "true" and again.json() == first.json()
    assert send(b"two").status_code == 422
    assert model.calls == 1 and models.Attachment.objects.count() == 1


# --- stream/ -----------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_stream_repeat_replays_an_equivalent_stream(owner_client, agent, model, resource):
    model.add("Hello there Ada")
    body = {"messages": "hello", "thread_id": "t-sse"}
    first = post(owner_client, STREAM, body)
    first_events = streamed(first)
    again = post(owner_client, STREAM, body)
    assert again.status_code == 200 and again[REPLAYED] == "true"
    assert again["Content-Type"].startswith("text/event-stream")
    events = streamed(again)
    assert text_of(events) == text_of(first_events) == "Hello there Ada"
    assert events[-1] == first_events[-1] and events[-1][0] == "finish"
    assert model.calls == 1 and models.Message.objects.count() == 2


@pytest.mark.django_db
def test_a_stream_replay_carries_tool_calls_and_results(owner_client, make_agent, model, resource):
    @tool
    def add(a: int, b: int) -> int:
        """Adds."""
        return a + b

    make_agent(tools=[add])
    model.add(ModelResponse(tool_calls=[ToolCall("c1", "add", {"a": 2, "b": 3})]), "It is 5")
    first = streamed(post(owner_client, STREAM, {"messages": "2+3?"}))
    again = streamed(post(owner_client, STREAM, {"messages": "2+3?"}))
    assert [kind for kind, _ in again] == ["tool-call", "tool-result", "text-delta", "finish"]
    assert {kind for kind, _ in first} == {"tool-call", "tool-result", "text-delta", "finish"}
    by_kind = {kind: data for kind, data in first}
    assert dict(again[:2]) == {"tool-call": by_kind["tool-call"], "tool-result": by_kind["tool-result"]}
    assert again[-1] == first[-1] and model.calls == 2


@pytest.mark.django_db
def test_a_blocked_stream_replays_its_tripwire(owner_client, agent, model, resource):
    model.add("the secret is out")
    first = streamed(post(owner_client, STREAM, {"messages": "tell me"}))
    again = streamed(post(owner_client, STREAM, {"messages": "tell me"}))
    assert first[-1][0] == "tripwire" and again == [first[-1]]
    assert model.calls == 1 and not models.Message.objects.exists()


class FailingMidStream:
    id = "test/failing"

    def __init__(self) -> None:
        self.calls = 0

    def generate(self, request: ModelRequest) -> ModelResponse:
        raise AssertionError("streams only")

    def stream(self, request: ModelRequest) -> Iterator[StreamEvent]:
        self.calls += 1
        yield StreamEvent(type="text-delta", text="Half an ans")
        if self.calls == 1:
            raise ModelUnavailableError("connection reset")
        yield StreamEvent(type="text-delta", text="wer")
        yield StreamEvent(type="finish", usage={}, finish_reason="stop")


@pytest.mark.django_db
def test_a_stream_that_fails_midway_releases_its_key(owner_client, make_agent, resource):
    make_agent(model=FailingMidStream())
    first = streamed(post(owner_client, STREAM, {"messages": "hello"}))
    assert first[-1][0] == "error" and not models.IdempotencyRecord.objects.exists()
    again = streamed(post(owner_client, STREAM, {"messages": "hello"}))
    assert again[-1][0] == "finish" and text_of(again) == "Half an answer"
    assert models.IdempotencyRecord.objects.get().state == "done"


@pytest.mark.django_db(transaction=True)  # close() ends the request: its connection may close
def test_a_stream_the_client_leaves_releases_its_key(owner_client, agent, model, resource):
    model.add("one two three four", "again")
    response = post(owner_client, STREAM, {"messages": "hello"})
    chunks = iter(response.streaming_content)
    next(chunks)
    response.close()  # the client went away after the first frame
    assert not models.IdempotencyRecord.objects.exists() and not models.Message.objects.exists()
    assert streamed(post(owner_client, STREAM, {"messages": "hello"}))[-1][1]["text"] == "again"


# --- two identical requests at once -----------------------------------------------------------------------


def _at_once(clients: list[Any], url: str, body: dict[str, Any], answered: threading.Event) -> list[Any]:
    results: list[Any] = [None] * len(clients)

    def send(i: int) -> None:
        try:
            response = post(clients[i], url, body)
            if getattr(response, "streaming", False):
                response.events = streamed(response)
            results[i] = response
        except Exception as exc:  # noqa: BLE001 - a 500 surfaces here; the test reports it
            results[i] = exc
        finally:
            answered.set()
            connections.close_all()

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(clients))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return results


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("url", [GENERATE, STREAM])
def test_two_identical_requests_at_once_run_one_turn(make_agent, user, resource, url):
    answered = threading.Event()

    def slow(request: ModelRequest) -> str:
        answered.wait(10)  # the turn waits until the other request has had its answer
        return "Only once"

    model = ScriptedModel([slow, slow])
    make_agent(model=model)
    results = _at_once([client_for(user), client_for(user)], url, {"messages": "hi"}, answered)
    statuses = sorted((getattr(r, "status_code", repr(r)) for r in results), key=str)
    assert statuses == [200, 409], results
    assert model.calls == 1
    assert models.Message.objects.count() == 2
    assert models.IdempotencyRecord.objects.get().state == "done"


# --- under ASGI --------------------------------------------------------------------------------------------


class AsyncModel:
    """Awaits its answer on the event loop, streamed in three deltas."""

    id = "test/async"

    def __init__(self) -> None:
        self.calls = 0

    def generate(self, request: ModelRequest) -> ModelResponse:
        raise AssertionError("the ASGI path awaits agenerate / astream")

    async def agenerate(self, request: ModelRequest) -> ModelResponse:
        self.calls += 1
        await asyncio.sleep(0.01)
        return ModelResponse(text="one two three")

    async def astream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        self.calls += 1
        for word in ("one ", "two ", "three"):
            await asyncio.sleep(0.01)
            yield StreamEvent(type="text-delta", text=word)
        yield StreamEvent(type="finish", usage={}, finish_reason="stop")


def run(fn: Any) -> Any:
    try:
        return async_to_sync(fn)()
    finally:
        connections.close_all()


@pytest.mark.django_db(transaction=True)
def test_under_asgi_a_stream_repeat_replays_asynchronously(user, make_agent, resource):
    model = AsyncModel()
    make_agent(model=model)
    client = AsyncClient()
    client.force_login(user)

    async def twice() -> list[tuple[Any, list[tuple[str, Any]]]]:
        answers = []
        for _ in range(2):
            response = await client.post(
                STREAM, {"messages": "hi"}, content_type="application/json", headers={"Idempotency-Key": "a1"}
            )
            assert response.status_code == 200 and response.is_async
            answers.append((response, parse_sse(b"".join([c async for c in response.streaming_content]))))
        return answers

    (first, first_events), (again, events) = run(twice)
    assert REPLAYED not in first and again[REPLAYED] == "true"
    assert text_of(events) == text_of(first_events) == "one two three"
    assert events[-1] == first_events[-1] and events[-1][0] == "finish"
    assert model.calls == 1 and models.Message.objects.count() == 2
    assert models.IdempotencyRecord.objects.get().state == "done"


@pytest.mark.django_db(transaction=True)
def test_under_asgi_a_generate_repeat_replays(user, make_agent, resource):
    model = AsyncModel()
    make_agent(model=model)
    client = AsyncClient()
    client.force_login(user)

    async def twice() -> list[Any]:
        return [
            await client.post(
                GENERATE,
                {"messages": "hi"},
                content_type="application/json",
                headers={"Idempotency-Key": "g1"},
            )
            for _ in range(2)
        ]

    first, again = run(twice)
    assert first.status_code == again.status_code == 200 and again[REPLAYED] == "true"
    assert again.json() == first.json() and model.calls == 1


@pytest.mark.django_db(transaction=True)
def test_under_asgi_a_stream_the_client_leaves_releases_its_key(user, make_agent, resource):
    """Through Django's own ASGI handler: the client disconnects after the first frame."""

    class Slow(AsyncModel):
        async def astream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
            yield StreamEvent(type="text-delta", text="one ")
            await asyncio.sleep(5)
            yield StreamEvent(type="finish", usage={}, finish_reason="stop")

    make_agent(model=Slow())
    sent = stream_and_leave(user, STREAM, {"messages": "hi"}, headers=((b"idempotency-key", b"leave-1"),))
    assert sent[0]["status"] == 200
    assert not models.Message.objects.exists()
    assert not models.IdempotencyRecord.objects.exists()
