"""Working memory over the API: read, replace (Markdown), merge (schema mode), validation, ownership."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import Permission

from memproc import Memory, models
from memproc.processors.working_memory import DEFAULT_TEMPLATE
from tests.api.conftest import API, client_for

pytestmark = pytest.mark.django_db

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "likes": {"type": "array", "items": {"type": "string"}},
    },
    "additionalProperties": False,
}


@pytest.fixture
def schema_agent(make_agent):
    return make_agent(id="profiled", memory=Memory(working_memory={"schema": SCHEMA, "scope": "thread"}))


@pytest.fixture
def markdown_agent(make_agent):
    return make_agent(id="noted", memory=Memory(working_memory={"template": "# Notes\n- Name:"}))


def thread_wm(thread_id: str) -> str:
    return f"{API}threads/{thread_id}/working-memory/"


def resource_wm(resource_id: str) -> str:
    return f"{API}resources/{resource_id}/working-memory/"


def test_thread_working_memory_starts_empty(owner_client, thread):
    response = owner_client.get(thread_wm(thread.public_id))
    assert response.status_code == 200
    assert response.json() == {
        "scope": "thread",
        "key": thread.public_id,
        "working_memory": "",
        "version": 0,
        "mode": "markdown",
    }


def test_markdown_put_replaces_and_records_a_revision(owner_client, user, thread):
    response = owner_client.put(
        thread_wm(thread.public_id), {"working_memory": "# User\n- Name: Ada"}, format="json"
    )
    assert response.status_code == 200
    assert response.json() == {
        "scope": "thread",
        "key": thread.public_id,
        "working_memory": "# User\n- Name: Ada",
        "version": 1,
        "mode": "markdown",
    }
    revision = models.WorkingMemoryRevision.objects.get()
    assert (revision.source, revision.actor, revision.new, revision.key) == (
        "api",
        user,
        "# User\n- Name: Ada",
        models.thread_key(thread.resource_id, thread.public_id),  # a revision names its thread by key
    )
    assert owner_client.get(thread_wm(thread.public_id)).json()["working_memory"] == "# User\n- Name: Ada"


def test_markdown_refuses_the_empty_template_over_real_data(owner_client, thread):
    owner_client.put(thread_wm(thread.public_id), {"working_memory": "# User\n- Name: Ada"}, format="json")
    response = owner_client.put(
        thread_wm(thread.public_id), {"working_memory": DEFAULT_TEMPLATE}, format="json"
    )
    assert response.status_code == 400
    assert "empty template" in response.json()["working_memory"][0]
    assert models.WorkingMemoryRevision.objects.count() == 1


def test_markdown_mode_takes_text_only(owner_client, thread):
    response = owner_client.put(
        thread_wm(thread.public_id), {"working_memory": {"name": "Ada"}}, format="json"
    )
    assert response.status_code == 400 and set(response.json()) == {"working_memory"}


def test_the_agent_parameter_picks_the_template_guard(owner_client, thread, markdown_agent):
    url = thread_wm(thread.public_id) + "?agent=noted"
    assert owner_client.put(url, {"working_memory": "# Notes\n- Name: Ada"}, format="json").status_code == 200
    response = owner_client.put(url, {"working_memory": "# Notes\n- Name:"}, format="json")
    assert response.status_code == 400


def test_unknown_agent_parameter_is_a_field_error(owner_client, thread):
    response = owner_client.get(thread_wm(thread.public_id) + "?agent=nobody")
    assert response.status_code == 400 and set(response.json()) == {"agent"}


def test_schema_mode_merges_and_shows_an_object(owner_client, thread, schema_agent):
    url = thread_wm(thread.public_id) + "?agent=profiled"
    first = owner_client.put(url, {"working_memory": {"name": "Ada", "likes": ["tea"]}}, format="json")
    assert first.status_code == 200
    assert first.json()["mode"] == "schema"
    assert first.json()["working_memory"] == {"name": "Ada", "likes": ["tea"]}
    second = owner_client.put(url, {"working_memory": {"age": 36, "likes": ["maths"]}}, format="json")
    assert second.json()["working_memory"] == {"name": "Ada", "age": 36, "likes": ["maths"]}
    assert second.json()["version"] == 2
    replaced = owner_client.put(url, {"working_memory": {"name": "Grace"}, "replace": True}, format="json")
    assert replaced.json()["working_memory"] == {"name": "Grace"}


def test_schema_mode_follows_the_threads_agent(owner_client, thread, schema_agent):
    models.Thread.objects.filter(pk=thread.pk).update(agent_id="profiled")
    response = owner_client.get(thread_wm(thread.public_id))
    assert response.json()["mode"] == "schema"
    assert response.json()["working_memory"] == {}


@pytest.mark.parametrize("bad", [{"age": "old"}, {"unknown": 1}, "[1, 2]", "not json"])
def test_schema_mismatch_is_a_400_and_writes_nothing(owner_client, thread, schema_agent, bad):
    models.Thread.objects.filter(pk=thread.pk).update(
        working_memory=json.dumps({"name": "Ada"}), working_memory_version=1
    )
    response = owner_client.put(
        thread_wm(thread.public_id) + "?agent=profiled", {"working_memory": bad}, format="json"
    )
    assert response.status_code == 400
    assert set(response.json()) == {"working_memory"}
    thread.refresh_from_db()
    assert (json.loads(thread.working_memory), thread.working_memory_version) == ({"name": "Ada"}, 1)
    assert not models.WorkingMemoryRevision.objects.exists()


@pytest.mark.parametrize(
    "body",
    [{}, {"working_memory": 5}, {"working_memory": ["a"]}, {"working_memory": "x", "replace": "maybe"}],
)
def test_put_validates_the_body(owner_client, thread, body):
    response = owner_client.put(thread_wm(thread.public_id), body, format="json")
    assert response.status_code == 400


def test_resource_working_memory_for_the_owner(owner_client, user):
    key = str(user.pk)
    assert owner_client.get(resource_wm(key)).json() == {
        "scope": "resource",
        "key": key,
        "working_memory": "",
        "version": 0,
        "mode": "markdown",
    }
    response = owner_client.put(resource_wm(key), {"working_memory": "- Likes: tea"}, format="json")
    assert response.status_code == 200 and response.json()["version"] == 1
    assert models.Resource.objects.get(pk=key).working_memory == "- Likes: tea"


def test_another_users_resource_working_memory_is_a_404(owner_client, other_resource):
    models.Resource.objects.filter(pk=other_resource.pk).update(working_memory="secret")
    assert owner_client.get(resource_wm(other_resource.pk)).status_code == 404
    response = owner_client.put(resource_wm(other_resource.pk), {"working_memory": "mine"}, format="json")
    assert response.status_code == 404
    other_resource.refresh_from_db()
    assert other_resource.working_memory == "secret"


def test_staff_with_view_thread_read_any_stored_resource_but_not_a_missing_one(staff, other_resource):
    staff.user_permissions.add(Permission.objects.get(codename="view_thread"))
    staff_client = client_for(staff)
    assert staff_client.get(resource_wm(other_resource.pk)).status_code == 200
    assert staff_client.get(resource_wm("never-stored")).status_code == 404
    response = staff_client.put(resource_wm(other_resource.pk), {"working_memory": "staff"}, format="json")
    assert response.status_code == 404


def test_staff_read_their_own_resource_before_anything_is_stored(staff):
    """The demo's memory panel asks for the signed-in user's working memory on a fresh site: an empty
    value, not a 404 (and no console error)."""
    staff.user_permissions.add(Permission.objects.get(codename="view_thread"))
    own = str(staff.pk)
    response = client_for(staff).get(resource_wm(own))
    assert response.status_code == 200
    assert (response.json()["working_memory"], response.json()["version"]) == ("", 0)
    assert not models.Resource.objects.filter(pk=own).exists()


def test_staff_need_change_thread_to_write_another_resources_memory(staff, other_resource):
    models.Resource.objects.filter(pk=other_resource.pk).update(working_memory="theirs")
    staff_client = client_for(staff)
    assert staff_client.get(resource_wm(other_resource.pk)).status_code == 404
    response = staff_client.put(resource_wm(other_resource.pk), {"working_memory": "staff"}, format="json")
    assert response.status_code == 404
    other_resource.refresh_from_db()
    assert other_resource.working_memory == "theirs"
    staff.user_permissions.add(Permission.objects.get(codename="change_thread"))
    staff = type(staff).objects.get(pk=staff.pk)  # Django caches a user's permissions on the object
    response = client_for(staff).put(
        resource_wm(other_resource.pk), {"working_memory": "staff"}, format="json"
    )
    assert response.status_code == 200
    other_resource.refresh_from_db()
    assert other_resource.working_memory == "staff"


def test_anonymous_working_memory_is_refused(api_client, thread):
    assert api_client.get(thread_wm(thread.public_id)).status_code in (401, 403)
    assert api_client.get(resource_wm(thread.resource_id)).status_code in (401, 403)
