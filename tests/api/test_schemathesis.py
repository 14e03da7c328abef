"""Property-based runs over the OpenAPI schema: no 500s, no HTML error pages, and every response as the
schema describes it.

Generated requests go through the project's WSGI application as an authenticated user who owns a
thread, a resource and an agent's worth of data, so some cases reach real objects; the rest are 404s
and 400s, which the schema also describes. The user is staff with the review queue's permissions
(`view_tripwirelog`, `change_tripwirelog`) but not `view_thread`, so the tripwire endpoints answer and
the thread endpoints stay scoped to the user's own resource.

Hostile input rides along: every operation with a `cursor` parameter is also sent forged cursors
(DESIGN §5: a 400 field error, never a 500), and a second run sends every operation with a JSON body
one larger than Django's `DATA_UPLOAD_MAX_MEMORY_SIZE` (2.5 MiB): whatever the status, it is no 5xx
and no HTML page.

Checks: every check of schemathesis 4 that applies to a stateless run with one identity (CHECKS):
server errors, status codes, content types, response headers and bodies, positive data acceptance,
negative data rejection, missing required headers, undeclared methods (405 with `Allow`), the `Allow`
header, and ignored auth (each success is replayed without and with wrong credentials).
`use_after_free` and `ensure_resource_availability` are listed but only bite in a stateful run;
`object_level_authorization` needs several configured identities, so it is left out.

What positive/negative data found, and what was done:
- A cursor the server never wrote (`?cursor=abc`): a 400 on `cursor` by design (DESIGN §5), the
  server's state like a 404, so it is one of STATE_ANSWERS; the parameter's description says so.
- `?agent=` naming no registered agent with working memory, a thread id the resource already has, a
  `message_id` of another thread, an object for a Markdown working memory: 400s that answer state,
  not shape (STATE_ANSWERS).
- 404, 409, 413, 429 are resource state: POSITIVE_STATUSES adds 413 to schemathesis's defaults.
- Ids (`id`, `thread_id`, `resource_id` of threads, clones, branches, turns): the schema said only
  "no slash or control character", the API also refuses other unprintable characters, "." and "..",
  spaces at either end and "". Schema corrected (IdField: `minLength` 1 and a pattern, ID_REGEX, that
  is the whole rule; the API checks the same regex), and an id sent as a number is now a 400.
- `?limit=` that is not a whole number of at least 1 was ignored (200): now a 400 on `limit`, and the
  schema says `minimum: 1`.
- `?status=`, `?phase=`, `?created_after=`, `?created_before=` sent empty were ignored: now a 400
  (the schema is an enum or a date-time), text filters may still be empty.
- A longer random hunt (MEMPROC_FUZZ_EXAMPLES=150 MEMPROC_FUZZ_RANDOM=1): an Idempotency-Key of a
  character the server refuses (the schema now has the server's pattern); a key sent again with
  another body, a 422 that answers state; NUL characters and lone surrogates in any string, a 400
  by design that a JSON schema cannot state of free-form values (UNSTORABLE_TEXT); a multipart turn
  with empty `messages` (the schema now says a message's text holds a character other than
  whitespace, and that the form's `files` are uploads, not URIs).
"""

from __future__ import annotations

import base64
import json
import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from django.contrib.auth.models import Permission
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, assume, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.config import PositiveDataAcceptanceConfig
from schemathesis.specs.openapi.checks import (
    allow_header_conformance,
    content_type_conformance,
    ensure_resource_availability,
    ignored_auth,
    missing_required_header,
    negative_data_rejection,
    positive_data_acceptance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
    unsupported_method,
    use_after_free,
)

from memproc import Memory
from project.wsgi import application
from tests.api.conftest import API
from tests.factories import MessageFactory, ResourceFactory, ThreadFactory, TripwireLogFactory, UserFactory

FUZZ_USER_PK = 4242
FUZZ_LOG_ID = "7e0e1d34-5f0c-4f43-9d1a-2a8f0c6b9e11"
KNOWN_IDS = ["fuzz-thread", "api-test", str(FUZZ_USER_PK), FUZZ_LOG_ID]
KNOWN_FIELDS = ["First Name", "Location"]
KNOWN_MESSAGES = ["fuzz-m1", "fuzz-m2"]
# Per operation and generation mode (positive, negative). A longer hunt than CI's:
# MEMPROC_FUZZ_EXAMPLES=150 MEMPROC_FUZZ_RANDOM=1 (new cases each run instead of the same ones).
EXAMPLES = int(os.environ.get("MEMPROC_FUZZ_EXAMPLES", "25"))
DERANDOMIZE = not os.environ.get("MEMPROC_FUZZ_RANDOM")
OVERSIZED_BYTES = 2_621_440 + 64 * 1024  # past Django's DATA_UPLOAD_MAX_MEMORY_SIZE (2.5 MiB)


def _b64(raw: str | bytes) -> str:
    return base64.b64encode(raw.encode() if isinstance(raw, str) else raw).decode("ascii")


# Cursors no server wrote: not base64, binary, impossible or overflowing dates, out-of-range numbers.
FORGED_CURSORS = [
    "%%%not-base64",
    _b64(b"\xff\xfe\x00"),
    _b64("p=2024-13-45T00:00:00"),
    _b64("p=0001-01-01T00:00:00+05:00"),
    _b64("p=9999-12-31T23:59:59-05:00"),
    _b64("p=2024-01-01T00:00:00+99:00"),
    _b64(f"p={2**63}"),
    _b64("p=" + "9" * 300),
    _b64("p=yesterday"),
    _b64("p=2024%00"),
    _b64("o=-1&r=x"),
]


def is_forged(case: Any) -> bool:
    return (case.query or {}).get("cursor") in FORGED_CURSORS


def no_html_error_page(ctx: Any, response: Any, case: Any) -> None:
    """An error is JSON (memproc's `{"detail", "code"}`, field errors, or OpenAI's shape), never the
    HTML page Django renders for an error that escaped DRF."""
    if response.status_code < 400:
        return None
    content_type = ";".join(response.headers.get("content-type", [""])).lower()
    assert "html" not in content_type, f"{response.status_code} answered {content_type}"
    assert not response.content.lstrip().startswith(b"<"), f"{response.status_code} answered markup"
    json.loads(response.content or b"{}")
    return None


def forged_cursor_refused(ctx: Any, response: Any, case: Any) -> None:
    """A forged cursor never pages; when the cursor is what the request got wrong, the answer says so."""
    if not is_forged(case):
        return None
    assert response.status_code >= 400, f"a forged cursor answered {response.status_code}"
    negative = case.meta is not None and case.meta.generation.mode.is_negative  # something else is wrong too
    if response.status_code == 400 and not negative:
        body = json.loads(response.content)
        assert "cursor" in body or "order" in body, body  # `?order=` is checked first on messages
    return None


# 400s that answer the server's state rather than the request's shape, as a 404 or a 409 would: a
# cursor the server never wrote, an agent that is not registered (or has no working memory), a thread
# id the resource already uses, a message of another thread, an object for a Markdown working memory,
# a memory-view field value its template or schema refuses.
STATE_ANSWERS = {
    "cursor": "Invalid cursor",
    "agent": "No registered agent ",
    "id": "This resource already has a thread ",
    "message_id": "This thread has no such message.",
    "working_memory": "This working memory is Markdown text.",
    "value": "Not a value for this field: ",
}


def answers_state(response: Any) -> bool:
    """A 400 whose every field error is one of STATE_ANSWERS."""
    if response.status_code != 400:
        return False
    body = json.loads(response.content)
    return bool(body) and all(
        field in STATE_ANSWERS
        and isinstance(messages, list)
        and all(str(m).startswith(STATE_ANSWERS[field]) for m in messages)
        for field, messages in body.items()
    )


# Text no database column can hold (PostgreSQL stores no NUL character, UTF-8 no lone surrogate): a
# 400 on any string, by design. A JSON schema cannot say so of free-form values (metadata), so the
# fuzzing keeps sending such text, for the other checks (no 500), and takes this refusal.
UNSTORABLE_TEXT = {"Null characters are not allowed.", "NUL characters and lone surrogates are not allowed."}


def error_messages(errors: Any) -> list[str]:
    """Every message of a DRF error body, however nested (`{"message_ids": {"0": [...]}}`)."""
    if isinstance(errors, dict):
        return [m for value in errors.values() for m in error_messages(value)]
    if isinstance(errors, list):
        return [m for value in errors for m in error_messages(value)]
    return [str(errors)]


def refuses_unstorable_text(response: Any) -> bool:
    if response.status_code != 400:
        return False
    messages = error_messages(json.loads(response.content))
    return bool(messages) and set(messages) <= UNSTORABLE_TEXT


def key_used_before(response: Any) -> bool:
    """The Idempotency-Key was sent earlier with another body: generated keys repeat across cases."""
    return (
        response.status_code == 422 and json.loads(response.content).get("code") == "idempotency_key_reused"
    )


def positive_data_accepted(ctx: Any, response: Any, case: Any) -> bool | None:
    """Schemathesis's `positive_data_acceptance` (a request valid by the schema is not refused; 404,
    409, 413 and 429 are the server's state, see POSITIVE_STATUSES), where a 400 of STATE_ANSWERS
    and a 422 for a key used before count as such state answers too, and a refusal of unstorable
    text as the rule the schema cannot state."""
    if answers_state(response) or key_used_before(response) or refuses_unstorable_text(response):
        return None
    return positive_data_acceptance(ctx, response, case)


CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    positive_data_accepted,
    negative_data_rejection,
    missing_required_header,
    unsupported_method,
    allow_header_conformance,
    ignored_auth,
    use_after_free,
    ensure_resource_availability,
    no_html_error_page,
    forged_cursor_refused,
]
HOSTILE_CHECKS = [not_a_server_error, no_html_error_page]

# Loaded once, at collection: the schema view needs no database.
schema = schemathesis.openapi.from_wsgi(f"{API}schema/?format=json", application)
schema.config.generation.update(
    modes=["positive", "negative"], max_examples=EXAMPLES, with_security_parameters=False
)
# Schemathesis's defaults (2xx, 3xx, 401, 403, 404, 409, 429, 5xx), and 413: a body past a size limit.
POSITIVE_STATUSES = ["2xx", "3xx", "401", "403", "404", "409", "413", "429", "5xx"]
schema.config.checks.positive_data_acceptance = PositiveDataAcceptanceConfig(
    expected_statuses=POSITIVE_STATUSES
)
# A second copy for the oversized bodies, whose hooks must not reach the conformance run.
oversized = schemathesis.openapi.from_wsgi(f"{API}schema/?format=json", application).include(
    method=["POST", "PUT", "PATCH"]
)
oversized.config.generation.update(modes=["positive"], max_examples=4, with_security_parameters=False)


@schema.hook
def before_generate_path_parameters(context: Any, strategy: st.SearchStrategy) -> st.SearchStrategy:
    """Now and then an id that exists: the user's thread, resource, the test agent, a tripwire log;
    in the memory view, a field of the default template or one of the user's messages."""
    path = context.operation.path
    if "{name}" in path:
        return st.one_of(strategy, st.sampled_from(KNOWN_FIELDS).map(lambda name: {"name": name}))
    known = KNOWN_MESSAGES if path.startswith(f"{API}memory/messages/") else KNOWN_IDS
    return st.one_of(strategy, st.sampled_from(known).map(lambda key: {"id": key}))


@oversized.hook("before_generate_path_parameters")
def existing_object(context: Any, strategy: st.SearchStrategy) -> st.SearchStrategy:
    """Always the object that exists, so the body is read rather than refused by a 404 first."""
    path = context.operation.path.removeprefix(API)
    owners = {"agents": "api-test", "threads": "fuzz-thread", "resources": str(FUZZ_USER_PK)}
    key = owners.get(path.split("/", 1)[0], FUZZ_LOG_ID)
    return st.just({"id": key}) if "{id}" in path else strategy


@schema.hook
def flatmap_query(context: Any, query: dict[str, Any] | None) -> st.SearchStrategy:
    """Lists with a cursor also get forged ones."""
    operation = context.operation
    if operation is None or "cursor" not in operation.query:
        return st.just(query)
    forged = st.sampled_from(FORGED_CURSORS).map(lambda cursor: {**(query or {}), "cursor": cursor})
    return st.one_of(st.just(query), forged)


@oversized.hook
def before_generate_body(context: Any, strategy: st.SearchStrategy) -> st.SearchStrategy:
    """One JSON object past the request size limit, in the fields most bodies have."""
    padding = "x" * OVERSIZED_BYTES
    return st.sampled_from(
        [
            {"messages": padding},
            {"title": padding, "metadata": {"note": padding[:1000]}},
            {"working_memory": padding},
            {"status": "confirmed", "note": padding},
        ]
    )


@pytest.fixture
def _keep_test_transaction() -> Iterator[None]:
    """Django closes "old" connections around each WSGI request; inside a test transaction that would
    poison it, so (as Django's test client does) the handlers are disconnected for the run."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def fuzz_headers(db: None, _keep_test_transaction: None, make_agent: Any, model: Any) -> dict[str, str]:
    """What the fuzzer may stumble on: the user's thread with messages, their resource, an agent, a
    tripwire log (the user reviews the queue but holds no thread permission)."""
    user = UserFactory(id=FUZZ_USER_PK, username="fuzzer", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(codename__in=["view_tripwirelog", "change_tripwirelog"])
    )
    thread = ThreadFactory(id="fuzz-thread", resource=ResourceFactory(id=str(user.pk)), last_sequence=3)
    for i in range(1, 4):
        MessageFactory(thread=thread, id=f"fuzz-m{i}", sequence=i)
    TripwireLogFactory(id=uuid.UUID(FUZZ_LOG_ID), thread_id=thread.public_id, resource_id=thread.resource_id)
    model.add(*[f"answer {i}" for i in range(500)])
    make_agent(memory=Memory(last_messages=5, working_memory=True))
    token = base64.b64encode(f"{user.get_username()}:pw".encode()).decode()
    return {"Authorization": f"Basic {token}"}


@schema.parametrize()
@settings(
    max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=DERANDOMIZE
)
def test_api_matches_its_schema(case: Any, fuzz_headers: dict[str, str]) -> None:
    assume(not sends_an_empty_form_field(case))
    case.call_and_validate(headers=fuzz_headers, checks=CHECKS)


def sends_an_empty_form_field(case: Any) -> bool:
    """A multipart field whose value is "" reaches the server as if it were absent through the WSGI
    transport: a required `messages` sent as "" was answered "This field is required.", an empty
    `resource_id` taken as the default. Such a case would be judged on a request it did not make; the
    server refuses "" when it arrives (tests/api/test_uploads.py)."""
    return (
        (case.media_type or "").startswith("multipart/")
        and isinstance(case.body, dict)
        and any(value == "" for value in case.body.values())
    )


@oversized.parametrize()
@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_oversized_bodies_are_never_a_server_error_or_html(case: Any, fuzz_headers: dict[str, str]) -> None:
    case.call_and_validate(headers=fuzz_headers, checks=HOSTILE_CHECKS)
