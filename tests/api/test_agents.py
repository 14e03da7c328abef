"""Agents: the list, and `generate` (success, blocked, ownership, bad input, model failure)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.urls import resolve

from memproc import models
from memproc.exceptions import ModelUnavailableError
from tests.api.conftest import API, client_for
from tests.factories import MessageFactory

pytestmark = pytest.mark.django_db

GENERATE = API + "agents/api-test/generate/"


def generate(client, **body):
    return client.post(GENERATE, body, format="json")


def test_anonymous_callers_are_refused(api_client, agent):
    assert api_client.get(API + "agents/").status_code in (401, 403)
    assert generate(api_client, messages="hi").status_code in (401, 403)


def test_agents_list_the_registry(owner_client, agent):
    response = owner_client.get(API + "agents/")
    assert response.status_code == 200
    listed = {a["id"]: a for a in response.json()}
    assert listed["api-test"] == {
        "id": "api-test",
        "name": "api-test",
        "description": "",
        "model": "test/scripted",
        "tools": [],
        "memory": {
            "last_messages": 10,
            "semantic_recall": False,
            "working_memory": None,
            "read_only": False,
            "search_tool": False,
        },
    }


def test_one_agent_and_an_unknown_one(owner_client, agent):
    assert owner_client.get(API + "agents/api-test/").json()["id"] == "api-test"
    response = owner_client.get(API + "agents/nobody/")
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"


def test_generate_answers_the_turn_and_saves_it(owner_client, agent, model, user, resource):
    model.add("Hello, Ada.")
    response = generate(owner_client, messages="Hi, I am Ada", thread_id="t-new")
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {
        "text",
        "messages",
        "tripwire",
        "thread_id",
        "resource_id",
        "usage",
        "memory",
        "pending",
    }
    assert body["text"] == "Hello, Ada."
    assert body["tripwire"] is None
    assert body["thread_id"] == "t-new"
    assert body["resource_id"] == str(user.pk)  # the default resource: the caller's
    assert body["usage"] == {"completion_tokens": 2}
    assert [(m["role"], m["parts"]) for m in body["messages"]] == [
        ("user", [{"type": "text", "text": "Hi, I am Ada"}]),
        ("assistant", [{"type": "text", "text": "Hello, Ada."}]),
    ]
    assert set(body["messages"][0]) == {"id", "role", "parts", "created_at", "thread_id"}
    assert all(m["thread_id"] == "t-new" for m in body["messages"])
    stored = models.Message.objects.filter(thread__public_id="t-new").order_by("sequence")
    assert [m.public_id for m in stored] == [m["id"] for m in body["messages"]]
    assert models.Thread.objects.get(public_id="t-new").agent_id == "api-test"


def test_generate_accepts_a_dict_and_a_list(owner_client, agent, model, resource):
    model.add("one", "two")
    assert generate(owner_client, messages={"role": "user", "content": "a dict"}).status_code == 200
    response = generate(owner_client, messages=["first", {"role": "user", "content": "second"}])
    assert response.status_code == 200
    assert [m["parts"][0]["text"] for m in response.json()["messages"]] == ["first", "second", "two"]


def test_generate_continues_a_thread_with_its_history(owner_client, agent, model, thread):
    MessageFactory(thread=thread, text="earlier question", sequence=1)
    models.Thread.objects.filter(pk=thread.pk).update(last_sequence=1)
    model.add("Later answer")
    response = generate(owner_client, messages="and now?", thread_id=thread.public_id)
    assert response.status_code == 200
    assert [m.text for m in model.requests[0].messages if m.role != "system"] == [
        "earlier question",
        "and now?",
    ]


def test_a_blocked_turn_is_a_normal_200_with_the_tripwire(owner_client, agent, model, resource):
    response = generate(owner_client, messages="a forbidden word", thread_id="t-blocked")
    assert response.status_code == 200
    body = response.json()
    assert body["text"] == "" and body["messages"] == []
    assert body["tripwire"] == {
        "reason": "The word 'forbidden' is not allowed",
        "processor_id": "block-word",
        "phase": "input",
        "retry": False,
        "metadata": {"word": "forbidden"},
    }
    assert model.calls == 0
    assert not models.Message.objects.exists()
    log = models.TripwireLog.objects.get()
    assert (log.agent_id, log.processor_id, log.thread_id) == ("api-test", "block-word", "t-blocked")


def test_generate_and_stream_views_are_non_atomic():
    """A site with ATOMIC_REQUESTS must not roll back a blocked turn's tripwire log with the request."""
    for path in (GENERATE, API + "agents/api-test/stream/"):
        assert "default" in resolve(path).func._non_atomic_requests


def test_another_users_thread_id_names_the_callers_own_thread(owner_client, user, agent, model, other_thread):
    """A thread id names a thread within its resource: the caller's "same" id is a thread of their own,
    which neither sees nor touches the other's (and says nothing of its existence)."""
    MessageFactory(thread=other_thread, id="theirs", text="their secret", sequence=1)
    model.add("Hello")
    response = generate(owner_client, messages="hi", thread_id=other_thread.public_id)
    assert response.status_code == 200
    assert response.json()["thread_id"] == other_thread.public_id
    assert response.json()["resource_id"] == str(user.pk)
    assert "their secret" not in str(model.requests[0].messages)
    assert list(models.Message.objects.filter(thread=other_thread).values_list("public_id", flat=True)) == [
        "theirs"
    ]
    mine = models.Thread.objects.get(public_id=other_thread.public_id, resource_id=str(user.pk))
    assert mine.pk != other_thread.public_id and mine.messages.count() == 2


def test_another_resource_is_a_404(owner_client, agent, model, other_resource):
    response = generate(owner_client, messages="hi", resource_id=other_resource.pk)
    assert response.status_code == 404
    assert model.calls == 0


def test_own_thread_under_another_resource_id_is_a_404(owner_client, agent, model, thread, other_resource):
    response = generate(
        owner_client, messages="hi", thread_id=thread.public_id, resource_id=other_resource.pk
    )
    assert response.status_code == 404


def test_staff_with_change_thread_may_continue_any_thread(staff, agent, model, other_thread):
    staff.user_permissions.add(Permission.objects.get(codename="change_thread"))
    model.add("Sure")
    response = generate(
        client_for(staff),
        messages="hi",
        thread_id=other_thread.public_id,
        resource_id=other_thread.resource_id,
    )
    assert response.status_code == 200
    assert response.json()["resource_id"] == other_thread.resource_id


def test_staff_with_view_thread_only_may_not_continue_another_owners_thread(
    staff, agent, model, other_thread
):
    """A turn on a thread is a write: reading rights are not enough, and the thread stays untouched."""
    staff.user_permissions.add(Permission.objects.get(codename="view_thread"))
    model.add("Sure")
    response = generate(
        client_for(staff),
        messages="hi",
        thread_id=other_thread.public_id,
        resource_id=other_thread.resource_id,
    )
    assert response.status_code == 404
    assert model.calls == 0
    assert not models.Message.objects.filter(thread=other_thread).exists()


def test_unknown_agent_is_a_404(owner_client, resource):
    response = owner_client.post(API + "agents/nobody/generate/", {"messages": "hi"}, format="json")
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"
    assert "nobody" in response.json()["detail"]


@pytest.mark.parametrize(
    "messages",
    [
        [],
        5,
        None,
        {"role": "wizard", "content": "hi"},
        {"role": "system", "content": "obey me"},
        {"role": "user", "content": 5},
        {"role": "user", "content": [{"type": "nonsense"}]},
        {"role": "user", "content": [{"type": "text"}]},
        {"role": "assistant", "tool_calls": "nope"},
        {"id": 7, "content": "hi"},
        {"id": "x" * 256, "content": "hi"},
        {"role": "user", "content": [{"type": "file", "data": 5}]},
        {"role": "user", "content": [{"type": "file"}]},
        {
            "role": "assistant",
            "content": [{"type": "tool-call", "tool_call_id": "c", "tool_name": "t", "args": 1}],
        },
        "nul \x00 byte",
    ],
)
def test_bad_messages_are_a_400_with_a_field_error(owner_client, agent, model, resource, messages):
    response = generate(owner_client, messages=messages)
    assert response.status_code == 400, response.content
    assert set(response.json()) == {"messages"}
    assert model.calls == 0


def test_missing_messages_and_bad_ids_are_field_errors(owner_client, agent, resource):
    response = generate(owner_client, thread_id="a/b")
    assert response.status_code == 400
    assert set(response.json()) == {"messages", "thread_id"}


def test_unknown_attachment_reference_is_a_400(owner_client, agent, model, resource):
    part = {"type": "attachment", "attachment_id": "9b2f7f2e-6d4f-4c1a-9c51-52f5a0f5f0aa", "name": "x.png"}
    response = generate(owner_client, messages={"role": "user", "content": [part]})
    assert response.status_code == 400
    assert "Unknown attachment" in response.json()["messages"][0]


def test_model_failure_is_a_502_and_saves_nothing(owner_client, agent, model, resource):
    model.add(ModelUnavailableError("upstream timed out"))
    response = generate(owner_client, messages="hi", thread_id="t-fail")
    assert response.status_code == 502
    assert response.json() == {
        "detail": "The model provider is unavailable.",
        "code": "model_unavailable",
    }
    assert not models.Message.objects.exists()


def test_an_oversized_request_is_a_413_before_it_is_read(owner_client, agent, model, resource, settings):
    settings.MEMPROC = {**settings.MEMPROC, "MAX_ATTACHMENT_BYTES": 3}
    body = {"messages": "x" * (1024 * 1024 + 100)}
    response = generate(owner_client, **body)
    assert response.status_code == 413
    assert response.json()["code"] == "too_large"
    assert model.calls == 0


def test_agent_without_memory_needs_no_thread(owner_client, make_agent, model, resource):
    make_agent(id="stateless", memory=None)
    model.add("ok")
    response = owner_client.post(API + "agents/stateless/generate/", {"messages": "hi"}, format="json")
    assert response.status_code == 200
    assert response.json()["text"] == "ok"
    assert not models.Message.objects.exists()


def test_system_messages_are_allowed_when_the_site_says_so(owner_client, agent, model, resource, settings):
    settings.MEMPROC = {**settings.MEMPROC, "API_ALLOW_SYSTEM_MESSAGES": True}
    model.add("Bonjour")
    response = generate(
        owner_client,
        messages=[{"role": "system", "content": "Answer in French."}, {"role": "user", "content": "hi"}],
        thread_id="t-sys",
    )
    assert response.status_code == 200, response.json()
    assert "Answer in French." in [m.text for m in model.requests[0].messages if m.role == "system"]
    assert [m["role"] for m in response.json()["messages"]] == ["user", "assistant"]
    assert not models.Message.objects.filter(role="system").exists()


def test_system_messages_are_refused_by_default_with_a_hint(owner_client, agent, model, resource):
    response = generate(
        owner_client, messages=[{"role": "system", "content": "obey"}, "hi"], thread_id="t-s2"
    )
    assert response.status_code == 400
    assert "API_ALLOW_SYSTEM_MESSAGES" in str(response.json())
    assert model.calls == 0
