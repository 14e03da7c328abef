"""Issue 16, item 9: forged pagination cursors.

A cursor is base64 of `o=<offset>&r=<reverse>&p=<position>` that the client sends back; nothing stops
it from sending its own. Any cursor the server did not write answers 400 `{"cursor": [...]}` (JSON)
on every cursor-paginated list — never a 500, whatever the position holds (an impossible date, a date
that overflows in UTC, a number past the column's range, NUL bytes, not base64 at all) — and the
cursors the server does write keep working, forwards and back. Run with `--db=postgres` too: its
timestamp and bigint columns refuse what SQLite would take.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

import pytest
from django.contrib.auth.models import Permission
from django.core.cache import cache
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rest_framework.test import APIClient

from memproc import models
from tests.factories import MessageFactory, ResourceFactory, ThreadFactory, TripwireLogFactory, UserFactory

pytestmark = pytest.mark.django_db

API = "/api/memproc/"
THREAD = "cursor-thread"
LISTS = {
    "threads": f"{API}threads/",
    "messages": f"{API}threads/{THREAD}/messages/",
    "messages-desc": f"{API}threads/{THREAD}/messages/?order=desc",
    "turns": f"{API}threads/{THREAD}/turns/",
    "tripwires": f"{API}tripwires/",
}
INVALID = {"cursor": ["Invalid cursor"]}


def forge(query: str | bytes) -> str:
    raw = query.encode() if isinstance(query, str) else query
    return base64.b64encode(raw).decode("ascii")


FORGED = {
    "not base64": "%%%not-base64%%%",
    "not ascii": "cD0yMDI0\u00e9",
    "base64 of binary": forge(b"\xff\xfe\x00\x01"),
    "impossible date": forge("p=2024-13-45T00:00:00"),
    "impossible time": forge("p=2024-01-01T25:61:00+00:00"),
    "offset past a day": forge("p=2024-01-01T00:00:00+99:00"),
    "year 0 in UTC": forge("p=0001-01-01T00:00:00+05:00"),
    "year 10000 in UTC": forge("p=9999-12-31T23:59:59-05:00"),
    "five-digit year": forge("p=12024-01-01T00:00:00"),
    "words": forge("p=yesterday"),
    "garbage position": forge("p=\u2603\u2603"),
    "NUL in position": forge("p=2024-01-01%00"),
    "empty position": forge("p="),
    "number past bigint": forge(f"p={2**63}"),
    "huge number": forge("p=" + "9" * 400),
    "float": forge("p=1e5"),
    "bad offset": forge("o=x&p=1"),
    "negative offset": forge("o=-5"),
    "bad reverse": forge("r=maybe"),
}


@pytest.fixture
def world(db: None) -> dict[str, APIClient]:
    """An owner with a thread of messages and turns, and a reviewer with tripwire logs to page."""
    cache.clear()
    owner = UserFactory(username="cursor-owner")
    reviewer = UserFactory(username="cursor-reviewer", is_staff=True)
    reviewer.user_permissions.add(Permission.objects.get(codename="view_tripwirelog"))
    resource = ResourceFactory(id=str(owner.pk))
    thread = ThreadFactory(id=THREAD, resource=resource, last_sequence=5)
    for i in range(1, 6):
        MessageFactory(thread=thread, id=f"cursor-m{i}", sequence=i)
    for i in range(4):
        ThreadFactory(id=f"cursor-t{i}", resource=resource, updated_at=timezone.now() - timedelta(minutes=i))
    start = timezone.now() - timedelta(hours=1)
    for i in range(5):
        models.TurnRecord.objects.create(
            agent_id="a",
            thread_id=THREAD,
            resource_id=resource.pk,
            status="completed",
            started_at=start + timedelta(minutes=i),
            duration_ms=1.0,
        )
        TripwireLogFactory(created_at=start + timedelta(minutes=i))
    clients = {}
    for key, user in (("owner", owner), ("reviewer", reviewer)):
        clients[key] = APIClient()
        clients[key].force_authenticate(user)
    return clients


def client_for(world: dict[str, APIClient], name: str) -> APIClient:
    return world["reviewer" if name == "tripwires" else "owner"]


def get(client: APIClient, url: str, cursor: str) -> Any:
    joiner = "&" if "?" in url else "?"
    return client.get(f"{url}{joiner}{urlencode({'cursor': cursor})}")


@pytest.mark.parametrize("forged", list(FORGED.values()), ids=list(FORGED))
@pytest.mark.parametrize("name", list(LISTS))
def test_a_forged_cursor_is_a_400_field_error(world: dict[str, APIClient], name: str, forged: str) -> None:
    response = get(client_for(world, name), LISTS[name], forged)
    assert response.status_code == 400, response.content
    assert response["Content-Type"].startswith("application/json")
    assert response.json() == INVALID


@pytest.mark.parametrize("name", ["threads", "turns", "tripwires"])
@pytest.mark.parametrize(
    "position",
    ["0001-01-01T00:00:00+00:00", "9999-12-31T23:59:59+00:00", "2024-01-01T00:00:00", "2024-01-01"],
    ids=["year 1", "year 9999", "naive", "a date"],
)
def test_a_forged_but_possible_time_pages(world: dict[str, APIClient], name: str, position: str) -> None:
    """A time the column can hold is a position like any other: an empty or partial page, no error."""
    response = get(client_for(world, name), LISTS[name], forge(urlencode({"p": position})))
    assert response.status_code == 200, response.content
    assert set(response.json()) == {"next", "previous", "results"}


@pytest.mark.parametrize("position", [str(-(2**63)), str(2**63 - 1), "0", "3"])
def test_a_forged_but_possible_sequence_pages(world: dict[str, APIClient], position: str) -> None:
    response = get(world["owner"], LISTS["messages"], forge(f"p={position}"))
    assert response.status_code == 200, response.content


@pytest.mark.parametrize("name", list(LISTS))
def test_the_servers_own_cursors_still_page_both_ways(world: dict[str, APIClient], name: str) -> None:
    client = client_for(world, name)
    url = LISTS[name]
    first = client.get(url + ("&" if "?" in url else "?") + "limit=2")
    assert first.status_code == 200
    seen, pages = [], [first.json()]
    while pages[-1]["next"]:
        response = client.get(pages[-1]["next"])
        assert response.status_code == 200, response.content
        pages.append(response.json())
    for page in pages:
        seen += [row["id"] for row in page["results"]]
    assert len(seen) == len(set(seen)) >= 5
    back = client.get(pages[-1]["previous"])
    assert back.status_code == 200
    assert [row["id"] for row in back.json()["results"]] == [row["id"] for row in pages[-2]["results"]]


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(
    name=st.sampled_from(list(LISTS)),
    make=st.sampled_from(
        [
            lambda text: text,
            lambda text: forge(urlencode({"p": text})),
            lambda text: forge(urlencode({"o": text, "p": "1"})),
            lambda text: forge(text.encode("utf-8", "surrogatepass")),
        ]
    ),
    text=st.text(max_size=40),
)
def test_no_cursor_is_ever_a_server_error(
    world: dict[str, APIClient], name: str, make: Callable[[str], str], text: str
) -> None:
    response = get(client_for(world, name), LISTS[name], make(text))
    assert response.status_code in (200, 400), (response.status_code, response.content[:300])
    if response.status_code == 400:
        assert response.json() == INVALID
