"""The API's branching (`POST threads/<id>/branch/`), resource export (`GET resources/<id>/export/`)
and thread list filters (`?metadata__<key>=`, `?ordering=`), with their permissions."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.utils import timezone

from memproc import models
from memproc.services.attachments import attachment_store
from tests.api.conftest import API, client_for
from tests.factories import MessageFactory, ThreadFactory, TripwireLogFactory

pytestmark = pytest.mark.django_db


def branch_url(thread_id: str) -> str:
    return f"{API}threads/{thread_id}/branch/"


def export_url(resource_id: str) -> str:
    return f"{API}resources/{resource_id}/export/"


def add_messages(thread, count: int) -> list[str]:
    return [
        MessageFactory(thread=thread, id=f"{thread.public_id}-m{i}", text=f"m{i}", sequence=i).public_id
        for i in range(1, count + 1)
    ]


def exported(response) -> dict:
    assert response.status_code == 200 and response["Content-Type"] == "application/json"
    assert response.streaming
    return json.loads(b"".join(response.streaming_content))


def staff_with(staff, *codenames):
    """A client for `staff` holding (only) these permissions; a fresh user object, whose permission
    cache is empty."""
    staff.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    return client_for(type(staff).objects.get(pk=staff.pk))


# --- branch -------------------------------------------------------------------------------------------


def test_a_branch_copies_the_messages_up_to_the_one_named(owner_client, thread):
    ids = add_messages(thread, 4)
    response = owner_client.post(
        branch_url(thread.public_id), {"message_id": ids[1], "id": "fork", "title": "Fork"}, format="json"
    )
    assert response.status_code == 201
    body = response.json()
    assert (body["id"], body["title"], body["resource_id"]) == ("fork", "Fork", thread.resource_id)
    assert body["metadata"] == {"cloned_from": thread.public_id, "branched_at": ids[1]}
    page = owner_client.get(f"{API}threads/fork/messages/").json()["results"]
    assert [m["parts"][0]["text"] for m in page] == ["m1", "m2"]
    assert not {m["id"] for m in page} & set(ids)


def test_a_branch_without_an_id_gets_one(owner_client, thread):
    ids = add_messages(thread, 2)
    response = owner_client.post(branch_url(thread.public_id), {"message_id": ids[0]}, format="json")
    assert response.status_code == 201 and response.json()["id"] not in ("", thread.public_id)
    assert response.json()["title"].startswith("Branch of")


def test_another_threads_message_is_a_field_error(owner_client, thread, resource):
    elsewhere = ThreadFactory(id="elsewhere", resource=resource)
    [foreign] = add_messages(elsewhere, 1)
    add_messages(thread, 1)
    response = owner_client.post(branch_url(thread.public_id), {"message_id": foreign}, format="json")
    assert response.status_code == 400 and set(response.json()) == {"message_id"}
    assert models.Thread.objects.count() == 2


@pytest.mark.parametrize("body", [{}, {"message_id": ""}, {"message_id": "m", "id": "a/b"}])
def test_bad_branch_input_is_a_400(owner_client, thread, body):
    assert owner_client.post(branch_url(thread.public_id), body, format="json").status_code == 400


def test_a_taken_id_is_a_400_on_id(owner_client, thread):
    ids = add_messages(thread, 1)
    ThreadFactory(id="taken", resource=thread.resource)
    response = owner_client.post(
        branch_url(thread.public_id), {"message_id": ids[0], "id": "taken"}, format="json"
    )
    assert response.status_code == 400 and set(response.json()) == {"id"}


def test_another_resources_thread_is_a_404(owner_client, other_thread):
    [message] = add_messages(other_thread, 1)
    response = owner_client.post(
        branch_url(other_thread.public_id), {"message_id": message, "id": "stolen"}, format="json"
    )
    assert response.status_code == 404
    assert response.json() == {"detail": "Not found.", "code": "not_found"}
    assert not models.Thread.objects.filter(pk="stolen").exists()


def test_staff_branch_others_threads_only_with_change_thread(staff, other_thread):
    [message] = add_messages(other_thread, 1)
    url = branch_url(other_thread.public_id) + f"?resource_id={other_thread.resource_id}"
    viewer = staff_with(staff, "view_thread")
    assert viewer.post(url, {"message_id": message}, format="json").status_code == 404
    editor = staff_with(staff, "change_thread")
    response = editor.post(url, {"message_id": message, "id": "s"}, format="json")
    assert response.status_code == 201 and response.json()["resource_id"] == other_thread.resource_id


def test_anonymous_callers_are_refused(api_client, thread):
    assert api_client.post(branch_url(thread.public_id), {"message_id": "x"}, format="json").status_code in (
        401,
        403,
    )
    assert api_client.get(export_url(thread.resource_id)).status_code in (401, 403)


# --- export -------------------------------------------------------------------------------------------


def test_the_owner_exports_their_resource(owner_client, thread, resource):
    add_messages(thread, 2)
    attachment = attachment_store(
        resource_id=resource.pk, data=b"bytes", name="a.txt", content_type="text/plain"
    )
    TripwireLogFactory(resource_id=resource.pk, thread_id=thread.public_id)
    document = exported(owner_client.get(export_url(resource.pk)))
    assert (document["format"], document["version"]) == ("memproc.export", 1)
    assert document["resource"]["id"] == resource.pk
    assert [t["id"] for t in document["threads"]] == [thread.public_id]  # the thread id, not the key
    assert [m["text"] for m in document["threads"][0]["messages"]] == ["m1", "m2"]
    assert document["tripwire_logs"] == []  # the review queue's records are not the owner's to read
    [item] = document["attachments"]
    assert item["id"] == str(attachment.pk) and item["url"].startswith("http://testserver/media/attachments/")


def test_another_resource_is_a_404(owner_client, other_thread):
    response = owner_client.get(export_url(other_thread.resource_id))
    assert response.status_code == 404 and response.json() == {"detail": "Not found.", "code": "not_found"}


def test_a_resource_with_nothing_stored_is_a_404(owner_client, user):
    assert owner_client.get(export_url(str(user.pk))).status_code == 404


def test_staff_export_any_resource_only_with_view_thread(staff, other_thread):
    add_messages(other_thread, 1)
    TripwireLogFactory(
        resource_id=other_thread.resource_id, thread_id=other_thread.public_id, reviewed_by=staff
    )
    assert client_for(staff).get(export_url(other_thread.resource_id)).status_code == 404
    document = exported(staff_with(staff, "view_thread").get(export_url(other_thread.resource_id)))
    assert document["threads"][0]["id"] == other_thread.public_id and document["tripwire_logs"] == []
    reviewer = staff_with(staff, "view_thread", "view_tripwirelog")
    document = exported(reviewer.get(export_url(other_thread.resource_id)))
    assert [log["reviewed_by"] for log in document["tripwire_logs"]] == [staff.username]
    assert [log["thread_id"] for log in document["tripwire_logs"]] == [other_thread.public_id]


def test_the_owners_copy_names_no_operator(owner_client, thread, resource, staff):
    from memproc.services.working_memory import working_memory_update

    working_memory_update(
        scope="resource", key=resource.pk, value="- edited by staff", source="admin", actor=staff
    )
    document = exported(owner_client.get(export_url(resource.pk)))
    assert [(r["new"], r["actor"]) for r in document["working_memory_revisions"]] == [
        ("- edited by staff", None)
    ]


# --- the thread list's filters and ordering ---------------------------------------------------------


@pytest.fixture
def listed(resource):
    base = timezone.now() - timedelta(hours=1)
    for i, (thread_id, metadata) in enumerate(
        [
            ("a", {"project": "x", "n": 1}),
            ("b", {"project": "x", "n": 2}),
            ("c", {"project": "y", "urgent": True}),
        ]
    ):
        ThreadFactory(
            id=thread_id,
            resource=resource,
            metadata=metadata,
            created_at=base - timedelta(minutes=i),
            updated_at=base + timedelta(minutes=i),
        )


def listed_ids(client, **params) -> list[str]:
    response = client.get(f"{API}threads/", params)
    assert response.status_code == 200, response.json()
    return [t["id"] for t in response.json()["results"]]


def test_the_list_filters_by_metadata(owner_client, listed, other_thread):
    models.Thread.objects.filter(pk=other_thread.pk).update(metadata={"project": "x"})
    assert listed_ids(owner_client, metadata__project="x") == ["b", "a"]
    assert listed_ids(owner_client, metadata__project="x", metadata__n="2") == ["b"]
    assert listed_ids(owner_client, metadata__urgent="true") == ["c"]
    assert listed_ids(owner_client, metadata__project="nope") == []


@pytest.mark.parametrize(
    ("ordering", "expected"),
    [
        (None, ["c", "b", "a"]),
        ("-updated_at", ["c", "b", "a"]),
        ("updated_at", ["a", "b", "c"]),
        ("created_at", ["c", "b", "a"]),
        ("-created_at", ["a", "b", "c"]),
    ],
)
def test_the_list_is_ordered_as_asked(owner_client, listed, ordering, expected):
    params = {} if ordering is None else {"ordering": ordering}
    assert listed_ids(owner_client, **params) == expected


def test_pages_follow_the_ordering(owner_client, listed):
    first = owner_client.get(f"{API}threads/", {"ordering": "updated_at", "limit": 2}).json()
    assert [t["id"] for t in first["results"]] == ["a", "b"]
    second = owner_client.get(first["next"]).json()
    assert [t["id"] for t in second["results"]] == ["c"]


@pytest.mark.parametrize("ordering", ["title", "id", "-resource_id", "updated_at,id", ""])
def test_an_unknown_ordering_is_a_400(owner_client, listed, ordering):
    response = owner_client.get(f"{API}threads/", {"ordering": ordering})
    assert response.status_code == 400 and set(response.json()) == {"ordering"}


def test_a_nul_in_a_metadata_filter_is_a_400(owner_client, listed):
    response = owner_client.get(f"{API}threads/", {"metadata__project": "x\x00"})
    assert response.status_code == 400 and set(response.json()) == {"metadata"}
