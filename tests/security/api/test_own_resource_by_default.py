"""A thread id alone means the caller's own resource, even for a superuser (finding 19 of the third
hostile review: a new superuser trying the API with `thread_id: "t1"` appended to another user's `t1`).
Acting on another owner's thread takes naming its `resource_id` (and the permission to)."""

from __future__ import annotations

import pytest

from memproc import models
from tests.api.conftest import API, client_for
from tests.factories import MessageFactory, UserFactory

GENERATE = API + "agents/api-test/generate/"


@pytest.mark.django_db
def test_a_superusers_thread_id_alone_is_their_own_thread(agent, model, thread):
    MessageFactory(thread=thread, id="theirs", role="user", text="the owner's words", sequence=1)
    superuser = UserFactory(is_staff=True, is_superuser=True)
    model.add("hello")
    response = client_for(superuser).post(
        GENERATE, {"messages": "hi", "thread_id": thread.public_id}, format="json"
    )
    assert response.status_code == 200, response.content
    assert response.json()["resource_id"] == str(superuser.pk)
    assert list(thread.messages.values_list("public_id", flat=True)) == ["theirs"]  # untouched
    assert "the owner's words" not in str(model.requests[0].messages)
    assert models.Thread.objects.filter(public_id=thread.public_id).count() == 2


@pytest.mark.django_db
def test_naming_the_resource_reaches_the_owners_thread(agent, model, thread):
    superuser = UserFactory(is_staff=True, is_superuser=True)
    model.add("hello")
    body = {"messages": "hi", "thread_id": thread.public_id, "resource_id": thread.resource_id}
    response = client_for(superuser).post(GENERATE, body, format="json")
    assert response.status_code == 200 and response.json()["resource_id"] == thread.resource_id
    assert thread.messages.count() == 2
    read = client_for(superuser).get(f"{API}threads/{thread.public_id}/")
    assert read.status_code == 404  # an id alone: the superuser's own resource has no such thread
