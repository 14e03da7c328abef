"""Threads: list and filter, create, read, patch, delete, messages (cursor pages), clone; all owner-scoped."""

from __future__ import annotations

import base64

import pytest
from django.contrib.auth.models import Permission

from memproc import models
from tests.api.conftest import API, client_for
from tests.factories import MessageFactory, ResourceFactory, ThreadFactory

pytestmark = pytest.mark.django_db

THREAD_FIELDS = {
    "id",
    "resource_id",
    "title",
    "agent_id",
    "metadata",
    "created_at",
    "updated_at",
    "archived_at",
}


def thread_url(thread_id: str, suffix: str = "") -> str:
    return f"{API}threads/{thread_id}/{suffix}"


def add_messages(thread, count: int) -> list[str]:
    ids = []
    for i in range(1, count + 1):
        ids.append(
            MessageFactory(thread=thread, id=f"{thread.public_id}-m{i}", text=f"m{i}", sequence=i).public_id
        )
    models.Thread.objects.filter(pk=thread.pk).update(last_sequence=count)
    return ids


def test_list_shows_only_the_callers_threads(owner_client, thread, other_thread):
    response = owner_client.get(API + "threads/")
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"next", "previous", "results"}
    assert [t["id"] for t in body["results"]] == [thread.public_id]
    assert set(body["results"][0]) == THREAD_FIELDS


def test_staff_with_view_thread_list_every_thread_and_filter_by_resource(staff, thread, other_thread):
    staff.user_permissions.add(Permission.objects.get(codename="view_thread"))
    staff_client = client_for(staff)
    ids = {t["id"] for t in staff_client.get(API + "threads/").json()["results"]}
    assert ids == {thread.public_id, other_thread.public_id}
    filtered = staff_client.get(API + "threads/", {"resource_id": other_thread.resource_id}).json()["results"]
    assert [t["id"] for t in filtered] == [other_thread.public_id]


def test_staff_without_view_thread_list_only_their_own(staff_client, staff, thread, other_thread):
    mine = ThreadFactory(id="staff-thread", resource=ResourceFactory(id=str(staff.pk)))
    ids = [t["id"] for t in staff_client.get(API + "threads/").json()["results"]]
    assert ids == [mine.public_id]


def test_resource_filter_cannot_widen_the_scope(owner_client, thread, other_thread):
    response = owner_client.get(API + "threads/", {"resource_id": other_thread.resource_id})
    assert response.status_code == 200
    assert response.json()["results"] == []


def test_thread_list_is_cursor_paginated(owner_client, resource):
    for i in range(3):
        ThreadFactory(id=f"page-{i}", resource=resource)
    first = owner_client.get(API + "threads/", {"limit": 2}).json()
    assert len(first["results"]) == 2 and first["next"]
    second = owner_client.get(first["next"]).json()
    seen = [t["id"] for t in first["results"] + second["results"]]
    assert sorted(seen) == ["page-0", "page-1", "page-2"]


def test_create_defaults_to_the_callers_resource(owner_client, user):
    response = owner_client.post(
        API + "threads/", {"id": "chosen", "title": "Trip", "metadata": {"topic": "travel"}}, format="json"
    )
    assert response.status_code == 201
    body = response.json()
    assert set(body) == THREAD_FIELDS
    assert (body["id"], body["resource_id"], body["title"], body["metadata"]) == (
        "chosen",
        str(user.pk),
        "Trip",
        {"topic": "travel"},
    )
    assert models.Thread.objects.get(public_id="chosen").resource_id == str(user.pk)


def test_create_generates_an_id(owner_client, resource):
    response = owner_client.post(API + "threads/", {"title": "No id"}, format="json")
    assert response.status_code == 201
    assert response.json()["id"]


def test_create_for_another_resource_is_a_404(owner_client, other_resource):
    response = owner_client.post(API + "threads/", {"resource_id": other_resource.pk}, format="json")
    assert response.status_code == 404
    assert not models.Thread.objects.exists()


@pytest.mark.parametrize(
    "body, field",
    [
        ({"id": "a/b"}, "id"),
        ({"id": "x" * 256}, "id"),
        ({"title": "t" * 256}, "title"),
        ({"title": 0.0}, "title"),  # a number is not a string (DRF would store "0.0")
        ({"title": 7}, "title"),
        ({"metadata": ["not", "an", "object"]}, "metadata"),
        ({"metadata": {"k": "nul\x00"}}, "metadata"),
    ],
)
def test_create_rejects_bad_input_with_field_errors(owner_client, resource, body, field):
    response = owner_client.post(API + "threads/", body, format="json")
    assert response.status_code == 400
    assert set(response.json()) == {field}


def test_create_with_a_taken_id_is_a_400(owner_client, thread):
    response = owner_client.post(API + "threads/", {"id": thread.public_id}, format="json")
    assert response.status_code == 400
    assert "already has a thread" in response.json()["id"][0]


def test_retrieve_patch_and_delete_own_thread(owner_client, thread):
    assert owner_client.get(thread_url(thread.public_id)).json()["title"] == "Mine"
    response = owner_client.patch(
        thread_url(thread.public_id), {"title": "Renamed", "metadata": {"a": 1}}, format="json"
    )
    assert response.status_code == 200
    assert (response.json()["title"], response.json()["metadata"]) == ("Renamed", {"a": 1})
    thread.refresh_from_db()
    assert thread.title == "Renamed"
    add_messages(thread, 2)
    assert owner_client.delete(thread_url(thread.public_id)).status_code == 204
    assert not models.Thread.objects.filter(pk=thread.pk).exists()
    assert not models.Message.objects.exists()


def test_patch_validates(owner_client, thread):
    response = owner_client.patch(thread_url(thread.public_id), {"metadata": "nope"}, format="json")
    assert response.status_code == 400 and set(response.json()) == {"metadata"}


def test_put_is_not_offered(owner_client, thread):
    assert owner_client.put(thread_url(thread.public_id), {"title": "x"}, format="json").status_code == 405


@pytest.mark.parametrize(
    "method, suffix, body",
    [
        ("get", "", None),
        ("patch", "", {"title": "mine now"}),
        ("delete", "", None),
        ("get", "messages/", None),
        ("post", "clone/", {}),
        ("get", "working-memory/", None),
        ("put", "working-memory/", {"working_memory": "# stolen"}),
    ],
)
def test_another_users_thread_is_a_404_everywhere(owner_client, other_thread, method, suffix, body):
    add_messages(other_thread, 1)
    models.Thread.objects.filter(pk=other_thread.pk).update(working_memory="secret")
    response = getattr(owner_client, method)(thread_url(other_thread.public_id, suffix), body, format="json")
    assert response.status_code == 404
    assert response.json() == {"detail": "Not found.", "code": "not_found"}
    other_thread.refresh_from_db()
    assert (other_thread.title, other_thread.working_memory) == ("Not yours", "secret")
    assert models.Message.objects.filter(thread=other_thread).count() == 1
    assert models.Thread.objects.count() == 1


def test_a_missing_thread_answers_the_same_404(owner_client, resource):
    assert owner_client.get(thread_url("nope")).json() == {"detail": "Not found.", "code": "not_found"}


def test_staff_with_view_thread_read_any_thread(staff, other_thread):
    staff.user_permissions.add(Permission.objects.get(codename="view_thread"))
    staff_client = client_for(staff)
    theirs = {"resource_id": other_thread.resource_id}  # an id alone means the caller's own resource
    assert staff_client.get(thread_url(other_thread.public_id)).status_code == 404
    assert staff_client.get(thread_url(other_thread.public_id), theirs).status_code == 200
    assert staff_client.get(thread_url(other_thread.public_id, "messages/"), theirs).status_code == 200
    patch_url = thread_url(other_thread.public_id) + f"?resource_id={other_thread.resource_id}"
    assert staff_client.patch(patch_url, {"title": "x"}, format="json").status_code == 404


def test_staff_without_view_thread_are_scoped_like_anyone(staff_client, other_thread):
    assert staff_client.get(thread_url(other_thread.public_id)).status_code == 404
    assert staff_client.get(thread_url(other_thread.public_id, "messages/")).status_code == 404


@pytest.mark.parametrize("client_name", ["api_client"])
def test_anonymous_thread_endpoints_are_refused(request, client_name, thread):
    client = request.getfixturevalue(client_name)
    for response in (
        client.get(API + "threads/"),
        client.post(API + "threads/", {}, format="json"),
        client.get(thread_url(thread.public_id)),
        client.get(thread_url(thread.public_id, "messages/")),
    ):
        assert response.status_code in (401, 403)


def test_messages_are_cursor_paginated_oldest_first(owner_client, thread):
    ids = add_messages(thread, 5)
    page = owner_client.get(thread_url(thread.public_id, "messages/"), {"limit": 2}).json()
    assert set(page) == {"next", "previous", "results"}
    seen = [m["id"] for m in page["results"]]
    assert set(page["results"][0]) == {"id", "role", "parts", "created_at", "thread_id"}
    while page["next"]:
        page = owner_client.get(page["next"]).json()
        seen += [m["id"] for m in page["results"]]
    assert seen == ids
    back = owner_client.get(page["previous"]).json()
    assert [m["id"] for m in back["results"]] == ids[2:4]


def test_messages_newest_first(owner_client, thread):
    ids = add_messages(thread, 5)
    page = owner_client.get(thread_url(thread.public_id, "messages/"), {"order": "desc", "limit": 3}).json()
    assert [m["id"] for m in page["results"]] == ids[::-1][:3]
    rest = owner_client.get(page["next"]).json()
    assert [m["id"] for m in rest["results"]] == ids[::-1][3:]
    assert rest["next"] is None


def test_messages_reject_a_bad_order_or_cursor(owner_client, thread):
    add_messages(thread, 1)
    assert (
        owner_client.get(thread_url(thread.public_id, "messages/"), {"order": "sideways"}).status_code == 400
    )
    garbage = owner_client.get(thread_url(thread.public_id, "messages/"), {"cursor": "garbage"})
    assert garbage.status_code == 400 and garbage.json() == {"cursor": ["Invalid cursor"]}
    forged = base64.b64encode(b"p=not-a-number").decode()
    assert owner_client.get(thread_url(thread.public_id, "messages/"), {"cursor": forged}).status_code == 400


def test_clone_copies_the_thread(owner_client, thread):
    add_messages(thread, 3)
    response = owner_client.post(
        thread_url(thread.public_id, "clone/"), {"id": "copy", "title": "Copy"}, format="json"
    )
    assert response.status_code == 201
    assert (response.json()["id"], response.json()["title"]) == ("copy", "Copy")
    copied = owner_client.get(thread_url("copy", "messages/")).json()["results"]
    assert [m["parts"][0]["text"] for m in copied] == ["m1", "m2", "m3"]


def test_clone_with_an_id_the_resource_uses_is_a_400(owner_client, thread):
    ThreadFactory(id="taken", resource=thread.resource)
    response = owner_client.post(thread_url(thread.public_id, "clone/"), {"id": "taken"}, format="json")
    assert response.status_code == 400 and set(response.json()) == {"id"}


def test_an_id_another_resource_uses_is_free_and_reveals_nothing(owner_client, thread):
    """A thread id names a thread within its resource: no existence oracle, no squatting."""
    theirs = ThreadFactory(id="taken", resource=ResourceFactory(id="someone-else"), title="Theirs")
    created = owner_client.post(API + "threads/", {"id": "taken", "title": "Mine too"}, format="json")
    cloned = owner_client.post(thread_url(thread.public_id, "clone/"), {"id": "taken-2"}, format="json")
    assert (created.status_code, cloned.status_code) == (201, 201)
    assert created.json()["id"] == "taken" and created.json()["resource_id"] == thread.resource_id
    assert owner_client.get(thread_url("taken")).json()["title"] == "Mine too"
    theirs.refresh_from_db()
    assert theirs.title == "Theirs"


def test_nul_in_a_path_id_is_a_404(owner_client, resource):
    assert owner_client.get(thread_url("bad%00id")).status_code == 404


def test_staff_name_the_resource_when_several_have_the_thread_id(staff, thread, other_thread):
    """Staff who reach every resource reach another owner's thread only through `?resource_id=`: an id
    alone means their own resource (a 404 here), and a resource without that thread is a 404."""
    staff.user_permissions.add(Permission.objects.get(codename="change_thread"))
    twin = ThreadFactory(id=thread.public_id, resource=other_thread.resource, title="Twin")
    staff_client = client_for(staff)
    assert staff_client.get(thread_url(thread.public_id)).status_code == 404
    for chosen in (thread, twin):
        response = staff_client.get(thread_url(thread.public_id), {"resource_id": chosen.resource_id})
        assert (response.status_code, response.json()["title"]) == (200, chosen.title)
        messages = staff_client.get(
            thread_url(thread.public_id, "messages/"), {"resource_id": chosen.resource_id}
        )
        assert messages.status_code == 200
    renamed = staff_client.patch(
        thread_url(thread.public_id) + f"?resource_id={twin.resource_id}", {"title": "Renamed"}, format="json"
    )
    assert renamed.status_code == 200
    twin.refresh_from_db()
    thread.refresh_from_db()
    assert (twin.title, thread.title) == ("Renamed", "Mine")
    nowhere = staff_client.get(thread_url(thread.public_id), {"resource_id": "nobody-here"})
    assert nowhere.status_code == 404


def test_a_user_sees_only_their_own_thread_of_a_shared_id(owner_client, thread, other_thread):
    ThreadFactory(id=thread.public_id, resource=other_thread.resource, title="Not yours")
    body = owner_client.get(thread_url(thread.public_id)).json()
    assert (body["title"], body["resource_id"]) == ("Mine", thread.resource_id)
    listed = [t["id"] for t in owner_client.get(API + "threads/").json()["results"]]
    assert listed == [thread.public_id]
    elsewhere = owner_client.get(thread_url(thread.public_id), {"resource_id": other_thread.resource_id})
    assert elsewhere.status_code == 404


@pytest.mark.parametrize(
    ("path", "method", "body"),
    [
        ("", "patch", {"title": 12}),
        ("clone/", "post", {"title": 1.5}),
        ("branch/", "post", {"message_id": 3}),
    ],
)
def test_text_fields_take_strings_only(owner_client, thread, path, method, body):
    """The schema says `string`: a number is a 400 on its field, and the thread is unchanged."""
    response = getattr(owner_client, method)(thread_url(thread.public_id) + path, body, format="json")
    assert response.status_code == 400, response.content
    assert response.json() == {field: ["Not a valid string."] for field in body}
    assert models.Thread.objects.get(pk=thread.pk).title == "Mine"
    assert models.Thread.objects.count() == 1
