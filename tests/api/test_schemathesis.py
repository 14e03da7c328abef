"""Property-based run over the OpenAPI schema: no 500s, and every response as the schema describes it.

Generated requests go through the project's WSGI application as an authenticated user who owns a
thread, a resource and an agent's worth of data, so some cases reach real objects; the rest are 404s
and 400s, which the schema also describes.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from memproc import Memory
from project.wsgi import application
from tests.api.conftest import API
from tests.factories import MessageFactory, ResourceFactory, ThreadFactory, UserFactory

FUZZ_USER_PK = 4242
KNOWN_IDS = ["fuzz-thread", "api-test", str(FUZZ_USER_PK)]
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]

# Loaded once, at collection: the schema view needs no database.
schema = schemathesis.openapi.from_wsgi(f"{API}schema/?format=json", application)
schema.config.generation.update(modes=["positive"], max_examples=25, with_security_parameters=False)


@schema.hook
def before_generate_path_parameters(context: Any, strategy: st.SearchStrategy) -> st.SearchStrategy:
    """Now and then an id that exists: the user's thread, resource, or the test agent."""
    return st.one_of(strategy, st.sampled_from(KNOWN_IDS).map(lambda key: {"id": key}))


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
    """What the fuzzer may stumble on: the user's thread with messages, their resource, an agent."""
    user = UserFactory(id=FUZZ_USER_PK, username="fuzzer")
    thread = ThreadFactory(id="fuzz-thread", resource=ResourceFactory(id=str(user.pk)))
    for i in range(1, 4):
        MessageFactory(thread=thread, id=f"fuzz-m{i}", sequence=i)
    model.add(*[f"answer {i}" for i in range(500)])
    make_agent(memory=Memory(last_messages=5, working_memory=True))
    token = base64.b64encode(f"{user.get_username()}:pw".encode()).decode()
    return {"Authorization": f"Basic {token}"}


@schema.parametrize()
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_api_matches_its_schema(case: Any, fuzz_headers: dict[str, str]) -> None:
    case.call_and_validate(headers=fuzz_headers, checks=CHECKS)
