"""memproc's own policies: the error mapping, the throttle, and turns outside ATOMIC_REQUESTS."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.test import override_settings

from memproc import exceptions, models
from memproc.api.errors import memproc_exception_handler
from memproc.api.throttling import MemprocUserThrottle
from memproc.services.working_memory import WorkingMemoryConflict
from tests.api.conftest import API


@pytest.mark.parametrize(
    "error, status, body",
    [
        (exceptions.ValidationError("bad shape"), 400, {"non_field_errors": ["bad shape"]}),
        (
            exceptions.ThreadOwnershipError("Thread 't' belongs to another resource"),
            404,
            {"detail": "Not found.", "code": "not_found"},
        ),
        (
            LookupError("No agent is registered with id 'x'"),
            404,
            {"detail": "No agent is registered with id 'x'", "code": "not_found"},
        ),
        (
            exceptions.AttachmentError("file.bin is larger than 10 MB", code="too_large"),
            413,
            {"detail": "file.bin is larger than 10 MB", "code": "too_large"},
        ),
        (
            exceptions.AttachmentError("not an image", code="type_not_allowed"),
            400,
            {"messages": ["not an image"]},
        ),
        (
            exceptions.ModelRateLimitError("slow down"),
            502,
            {
                "detail": "The model provider is rate limiting requests; try again later.",
                "code": "model_rate_limited",
            },
        ),
        (
            WorkingMemoryConflict("kept changing"),
            409,
            {"detail": "kept changing", "code": "working_memory_conflict"},
        ),
        (
            exceptions.EmbedderUnavailable("down"),
            503,
            {"detail": "The embedder is unavailable.", "code": "embedder_unavailable"},
        ),
    ],
)
def test_memproc_errors_map_to_statuses(error, status, body):
    response = memproc_exception_handler(error, {})
    assert (response.status_code, response.data) == (status, body)


def test_programming_errors_are_not_disguised_as_404s():
    assert memproc_exception_handler(KeyError("oops"), {}) is None
    assert memproc_exception_handler(IndexError("oops"), {}) is None


@pytest.mark.django_db
def test_malformed_json_is_a_400(owner_client, agent):
    response = owner_client.post(
        API + "agents/api-test/generate/", "{not json", content_type="application/json"
    )
    assert response.status_code == 400
    assert response.json()["code"] == "parse_error"


@pytest.mark.django_db
def test_absurdly_nested_json_is_a_400(owner_client, agent, resource):
    body = '{"messages": ' + "[" * 100_000 + "]" * 100_000 + "}"
    response = owner_client.post(API + "agents/api-test/generate/", body, content_type="application/json")
    assert response.status_code == 400


@pytest.mark.django_db
def test_only_json_bodies_are_accepted_except_uploads_to_turns(owner_client, agent):
    response = owner_client.post(API + "threads/", {"title": "form"})  # multipart
    assert response.status_code == 415
    response = owner_client.post(
        API + "agents/api-test/generate/", "messages=hi", content_type="application/x-www-form-urlencoded"
    )
    assert response.status_code == 415


def test_throttle_has_a_fallback_rate_when_the_project_sets_none():
    with override_settings(REST_FRAMEWORK={**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {}}):
        assert MemprocUserThrottle().get_rate() == MemprocUserThrottle.fallback_rate
    with override_settings(
        REST_FRAMEWORK={**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"memproc": None}}
    ):
        assert MemprocUserThrottle().rate is None


@pytest.mark.django_db
def test_throttle_rate_comes_from_the_projects_rates(owner_client, resource):
    rates = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"memproc": "2/minute"}}
    with override_settings(REST_FRAMEWORK=rates):
        assert owner_client.get(API + "threads/").status_code == 200
        assert owner_client.get(API + "threads/").status_code == 200
        response = owner_client.get(API + "threads/")
    assert response.status_code == 429
    assert response.json()["code"] == "throttled"


@pytest.mark.django_db(transaction=True)
def test_a_blocked_turn_keeps_its_log_under_atomic_requests(
    owner_client, agent, model, resource, monkeypatch, memproc_connection
):
    monkeypatch.setitem(memproc_connection.settings_dict, "ATOMIC_REQUESTS", True)
    response = owner_client.post(API + "agents/api-test/generate/", {"messages": "forbidden"}, format="json")
    assert response.status_code == 200 and response.json()["tripwire"]
    assert models.TripwireLog.objects.filter(processor_id="block-word").exists()


class SeesTheTransaction:
    """An input processor that notes whether memproc's database is in a transaction as the turn runs."""

    id = "sees-the-transaction"

    def __init__(self, connection) -> None:
        self.connection = connection
        self.seen: list[bool] = []

    def process_input(self, ctx) -> None:
        self.seen.append(self.connection.in_atomic_block)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("path", "payload"),
    [
        ("agents/api-test/generate/", {"messages": "hello"}),
        ("v1/chat/completions", {"model": "api-test", "messages": [{"role": "user", "content": "hello"}]}),
    ],
)
def test_a_turn_runs_outside_a_request_transaction_on_memprocs_database(
    path, payload, owner_client, make_agent, model, monkeypatch, memproc_connection
):
    """ATOMIC_REQUESTS on the database that holds memproc's tables (the default one, or the router's
    other): a turn owns its commit, so its after-commit work and its locks do not wait for the whole
    request, model call included."""
    sees = SeesTheTransaction(memproc_connection)
    make_agent(input_processors=[sees])
    model.add("hi")
    monkeypatch.setitem(memproc_connection.settings_dict, "ATOMIC_REQUESTS", True)
    response = owner_client.post(API + path, payload, format="json")
    assert response.status_code == 200, response.content
    assert sees.seen == [False]
