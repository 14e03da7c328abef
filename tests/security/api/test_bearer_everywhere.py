"""A DRF token sent as `Authorization: Bearer <key>` works on every memproc endpoint, not only on the
protocol ones (finding 17 of the third hostile review: `generate/` and `threads/` answered 403)."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from tests.api.conftest import API


@pytest.fixture
def bearer(user: Any, resource: Any) -> APIClient:
    from rest_framework.authtoken.models import Token

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {Token.objects.create(user=user).key}")
    return client


@pytest.mark.django_db
def test_a_bearer_token_runs_a_turn_and_reads_the_thread(bearer, agent, model):
    model.add("hello")
    model.add("hello again")
    turn = bearer.post(API + "agents/api-test/generate/", {"messages": "hi", "thread_id": "t"}, format="json")
    assert turn.status_code == 200, turn.content
    assert bearer.get(API + "threads/").status_code == 200
    assert "hi" in str(bearer.get(API + "threads/t/messages/").json()["results"][0])
    assert (
        bearer.post(
            API + "agents/api-test/stream/", {"messages": "again", "thread_id": "t"}, format="json"
        ).status_code
        == 200
    )


@pytest.mark.django_db
def test_an_unknown_bearer_token_is_a_401_not_a_403(agent):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Bearer not-a-token")
    response = client.get(API + "threads/")
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
