"""`GET threads/<id>/turns/`: a thread's turn records, scoped like its messages, newest first."""

from __future__ import annotations

import base64
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.utils import timezone

from memproc import models
from tests.api.conftest import API, client_for

pytestmark = pytest.mark.django_db


def turns_url(thread_id: str) -> str:
    return f"{API}threads/{thread_id}/turns/"


def make_records(thread, count: int) -> list[models.TurnRecord]:
    """`count` records, one a minute, oldest first."""
    start = timezone.now() - timedelta(hours=1)
    return [
        models.TurnRecord.objects.create(
            agent_id="api-test",
            thread_id=thread.public_id,
            resource_id=thread.resource_id,
            status="completed",
            model="test/scripted",
            steps=1,
            usage={"completion_tokens": 3},
            manifest={"history": [f"m{i}"], "recalled": [], "working_memory": None, "processors": []},
            message_ids=[f"in{i}", f"out{i}"],
            started_at=start + timedelta(minutes=i),
            duration_ms=10.0 + i,
        )
        for i in range(count)
    ]


def test_the_owner_reads_a_real_turns_record(owner_client, resource, agent, model):
    model.add("Hello there")
    generated = owner_client.post(
        f"{API}agents/{agent.id}/generate/", {"messages": "hi", "thread_id": "turned"}, format="json"
    )
    assert generated.status_code == 200, generated.content
    response = owner_client.get(turns_url("turned"))
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"next", "previous", "results"}
    [record] = body["results"]
    assert record["thread_id"] == "turned" and record["resource_id"] == resource.pk
    assert record["agent_id"] == agent.id and record["status"] == "completed"
    assert record["message_ids"] == [m["id"] for m in generated.json()["messages"]]
    assert record["tripwire_id"] is None and record["error"] == ""
    assert record["steps"] == 1 and record["duration_ms"] > 0
    assert set(record["manifest"]) >= {"history", "recalled", "working_memory", "tokens", "processors"}
    assert record["usage"] == {"completion_tokens": 2}


def test_a_blocked_turn_names_its_tripwire(owner_client, thread, agent):
    owner_client.post(
        f"{API}agents/{agent.id}/generate/",
        {"messages": "a forbidden word", "thread_id": thread.public_id},
        format="json",
    )
    [record] = owner_client.get(turns_url(thread.public_id)).json()["results"]
    log = models.TripwireLog.objects.get()
    assert record["status"] == "blocked" and record["tripwire_id"] == str(log.pk)


def test_newest_first_with_cursor_pages(owner_client, thread):
    records = make_records(thread, 5)
    seen, url = [], turns_url(thread.public_id) + "?limit=2"
    while url:
        page = owner_client.get(url).json()
        assert len(page["results"]) <= 2
        seen += [r["id"] for r in page["results"]]
        url = page["next"]
    assert seen == [str(r.pk) for r in reversed(records)]


def test_a_tampered_cursor_is_a_400_field_error(owner_client, thread):
    make_records(thread, 1)
    forged = base64.b64encode(b"p=not-a-date").decode()
    for cursor in ("garbage", forged):
        response = owner_client.get(turns_url(thread.public_id), {"cursor": cursor})
        assert response.status_code == 400 and response.json() == {"cursor": ["Invalid cursor"]}


def test_only_this_threads_records(owner_client, thread, other_thread):
    make_records(thread, 1)
    make_records(other_thread, 2)
    results = owner_client.get(turns_url(thread.public_id)).json()["results"]
    assert [r["thread_id"] for r in results] == [thread.public_id]


def test_another_owners_thread_is_a_404(other_client, owner_client, thread):
    make_records(thread, 1)
    assert other_client.get(turns_url(thread.public_id)).status_code == 404
    assert owner_client.get(turns_url("no-such-thread")).status_code == 404


def test_anonymous_callers_are_refused(api_client, thread):
    assert api_client.get(turns_url(thread.public_id)).status_code in (401, 403)


def test_staff_are_scoped_exactly_like_messages(staff_client, other_thread):
    """Whatever the resource resolver grants a staff user without `memproc.view_thread` for a thread's
    messages, it grants for its turns: the two endpoints share one permission path."""
    make_records(other_thread, 1)
    messages = staff_client.get(f"{API}threads/{other_thread.public_id}/messages/")
    turns = staff_client.get(turns_url(other_thread.public_id))
    assert turns.status_code == messages.status_code == 404


def test_staff_with_view_thread_read_another_owners_turns(staff, other_thread):
    staff.user_permissions.add(Permission.objects.get(codename="view_thread"))
    make_records(other_thread, 2)
    response = client_for(staff).get(
        turns_url(other_thread.public_id), {"resource_id": other_thread.resource_id}
    )
    assert response.status_code == 200 and len(response.json()["results"]) == 2


def test_staff_are_scoped_like_anyone_by_a_resolver_that_says_so(staff_client, other_thread, settings):
    settings.MEMPROC = {**settings.MEMPROC, "RESOURCE_RESOLVER": "tests.api.test_thread_turns.own_only"}
    make_records(other_thread, 1)
    assert staff_client.get(f"{API}threads/{other_thread.public_id}/messages/").status_code == 404
    assert staff_client.get(turns_url(other_thread.public_id)).status_code == 404


def own_only(request) -> list[str]:
    """A resolver without the staff shortcut: everyone, staff too, owns the resource named by their pk."""
    return [str(request.user.pk)] if request.user.is_authenticated else []


def test_the_endpoint_is_in_the_openapi_schema(api_client):
    document = api_client.get(API + "schema/", {"format": "json"}).json()
    operation = document["paths"][API + "threads/{id}/turns/"]["get"]
    assert operation["summary"] and {"200", "404"} <= set(operation["responses"])
    names = {p["name"] for p in operation["parameters"]}
    assert {"id", "cursor", "limit"} <= names
    page = document["components"]["schemas"]["TurnRecordPage"]
    assert set(page["properties"]) == {"next", "previous", "results"}
    record = document["components"]["schemas"]["TurnRecord"]["properties"]
    assert record["manifest"]["properties"]["recalled"]["items"]["properties"]["score"]["type"] == "number"
