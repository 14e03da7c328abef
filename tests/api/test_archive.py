"""Archiving threads through the API: `POST threads/<id>/archive/` and `unarchive/`, `archived_at` in
the thread, and the list's `?archived=` filter (archived threads are left out by default)."""

from __future__ import annotations

import pytest

from memproc import models
from tests.api.conftest import API, client_for
from tests.api.test_branch_and_export import staff_with
from tests.factories import ThreadFactory

pytestmark = pytest.mark.django_db


def archive_url(thread_id: str, verb: str = "archive") -> str:
    return f"{API}threads/{thread_id}/{verb}/"


def listed(client, query: str = "") -> list[str]:
    response = client.get(f"{API}threads/{query}")
    assert response.status_code == 200, response.json()
    return [t["id"] for t in response.json()["results"]]


def test_the_owner_archives_and_unarchives_a_thread(owner_client, thread):
    assert owner_client.get(f"{API}threads/{thread.public_id}/").json()["archived_at"] is None
    response = owner_client.post(archive_url(thread.public_id))
    assert response.status_code == 200
    assert response.json()["id"] == thread.public_id and response.json()["archived_at"] is not None
    thread.refresh_from_db()
    assert thread.archived_at is not None
    response = owner_client.post(archive_url(thread.public_id, "unarchive"))
    assert response.status_code == 200 and response.json()["archived_at"] is None
    thread.refresh_from_db()
    assert thread.archived_at is None


def test_archiving_is_idempotent_and_keeps_the_first_time(owner_client, thread):
    first = owner_client.post(archive_url(thread.public_id)).json()["archived_at"]
    again = owner_client.post(archive_url(thread.public_id))
    assert again.status_code == 200 and again.json()["archived_at"] == first
    assert owner_client.post(archive_url(thread.public_id, "unarchive")).status_code == 200
    again = owner_client.post(archive_url(thread.public_id, "unarchive"))
    assert again.status_code == 200 and again.json()["archived_at"] is None


def test_archiving_leaves_the_threads_place_in_the_list(owner_client, thread):
    updated_at = thread.updated_at
    owner_client.post(archive_url(thread.public_id))
    thread.refresh_from_db()
    assert thread.updated_at == updated_at


@pytest.mark.parametrize("verb", ["archive", "unarchive"])
def test_another_users_thread_is_a_404(owner_client, other_thread, verb):
    url = archive_url(other_thread.public_id, verb) + f"?resource_id={other_thread.resource_id}"
    response = owner_client.post(url)
    assert response.status_code == 404
    assert response.json() == {"detail": "Not found.", "code": "not_found"}
    assert owner_client.post(archive_url(other_thread.public_id, verb)).status_code == 404
    other_thread.refresh_from_db()
    assert other_thread.archived_at is None


def test_staff_archive_others_threads_only_with_change_thread(staff, other_thread):
    url = archive_url(other_thread.public_id) + f"?resource_id={other_thread.resource_id}"
    assert client_for(staff).post(url).status_code == 404
    assert staff_with(staff, "view_thread").post(url).status_code == 404
    other_thread.refresh_from_db()
    assert other_thread.archived_at is None
    response = staff_with(staff, "change_thread").post(url)
    assert response.status_code == 200 and response.json()["archived_at"] is not None


def test_anonymous_callers_are_refused(api_client, thread):
    assert api_client.post(archive_url(thread.public_id)).status_code in (401, 403)
    thread.refresh_from_db()
    assert thread.archived_at is None


def test_the_list_leaves_archived_threads_out_unless_asked(owner_client, resource, thread):
    kept = ThreadFactory(id="kept", resource=resource)
    owner_client.post(archive_url(thread.public_id))
    assert listed(owner_client) == [kept.public_id]
    assert listed(owner_client, "?archived=false") == [kept.public_id]
    assert listed(owner_client, "?archived=true") == [thread.public_id]
    assert sorted(listed(owner_client, "?archived=all")) == sorted([kept.public_id, thread.public_id])
    owner_client.post(archive_url(thread.public_id, "unarchive"))
    assert sorted(listed(owner_client)) == sorted([kept.public_id, thread.public_id])


def test_the_archived_filter_combines_with_the_others(owner_client, resource):
    ThreadFactory(id="a1", resource=resource, agent_id="helper")
    ThreadFactory(id="a2", resource=resource, agent_id="other")
    owner_client.post(archive_url("a1"))
    owner_client.post(archive_url("a2"))
    assert listed(owner_client, "?archived=true&agent=helper") == ["a1"]


@pytest.mark.parametrize("value", ["yes", "1", "", "TRUE"])
def test_a_bad_archived_value_is_a_400_with_field_errors(owner_client, thread, value):
    response = owner_client.get(f"{API}threads/?archived={value}")
    assert response.status_code == 400
    assert "archived" in response.json()


def test_a_thread_of_its_own_endpoints_is_found_archived_or_not(owner_client, thread):
    owner_client.post(archive_url(thread.public_id))
    response = owner_client.get(f"{API}threads/{thread.public_id}/")
    assert response.status_code == 200 and response.json()["archived_at"] is not None
    assert owner_client.get(f"{API}threads/{thread.public_id}/messages/").status_code == 200


def test_the_schema_describes_archiving(api_client):
    document = api_client.get(f"{API}schema/?format=json").json()
    paths = document["paths"]
    for verb in ("archive", "unarchive"):
        operation = paths[f"{API}threads/{{id}}/{verb}/"]["post"]
        assert operation["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith(
            "/Thread"
        )
        assert "404" in operation["responses"]
    archived = next(p for p in paths[f"{API}threads/"]["get"]["parameters"] if p["name"] == "archived")
    assert set(archived["schema"]["enum"]) == {"all", "false", "true"}
    assert "archived_at" in document["components"]["schemas"]["Thread"]["properties"]
    assert models.Thread._meta.get_field("archived_at").null


@pytest.mark.parametrize("body", ["511", "[]", '"archive"'])
def test_a_body_that_is_not_a_json_object_is_a_400(owner_client, thread, body):
    response = owner_client.post(archive_url(thread.public_id), body, content_type="application/json")
    assert response.status_code == 400
    thread.refresh_from_db()
    assert thread.archived_at is None


def test_an_empty_object_is_accepted(owner_client, thread):
    assert owner_client.post(archive_url(thread.public_id), {}, format="json").status_code == 200
