"""The end-user memory view (issue 39 item 4): `memory/` shows the caller's working memory by field,
recent recalls with why, and excluded messages; a user corrects and pins fields and excludes messages
from recall; nobody reaches another resource's memory."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from django.contrib.auth.models import Permission

from memproc import Memory, models
from memproc.agents import register, unregister
from memproc.llm.types import ModelResponse, ToolCall
from memproc.processors.working_memory import DEFAULT_TEMPLATE
from tests.api.conftest import API, client_for
from tests.conftest import committing_agent_class

pytestmark = pytest.mark.django_db

AGENT = "memory-view"
MEMORY = f"{API}memory/"
SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}}


def field_url(name: str, action: str = "") -> str:
    return f"{MEMORY}fields/{quote(name)}/" + (f"{action}/" if action else "")


def message_url(message_id: str, action: str) -> str:
    return f"{MEMORY}messages/{message_id}/{action}/"


def update(memory) -> ModelResponse:
    return ModelResponse(tool_calls=[ToolCall("wm1", "updateWorkingMemory", {"memory": memory})])


def wm_system(model, call: int = -1) -> str:
    return next(m.text for m in model.requests[call].messages if m.id == "working-memory")


@pytest.fixture
def agent(model):
    agent = committing_agent_class()(
        id=AGENT,
        instructions="Remember.",
        model=model,
        memory=Memory(last_messages=4, working_memory=True, semantic_recall={"top_k": 4, "message_range": 0}),
    )
    register(agent, replace=True)
    yield agent
    unregister(AGENT)


@pytest.fixture
def schema_agent(model):
    agent = committing_agent_class()(
        id="memory-view-schema", instructions="Remember.", model=model,
        memory=Memory(last_messages=4, working_memory={"schema": SCHEMA}),
    )  # fmt: skip
    register(agent, replace=True)
    yield agent
    unregister(agent.id)


@pytest.fixture
def remembered(agent, model, user):
    """Two turns of the owner: the first names Ada (the model updates working memory) and a cat; the
    second, in another thread, recalls the cat. Returns the first turn's user message id."""
    me = str(user.pk)
    model.add(
        update(DEFAULT_TEMPLATE.replace("- **First Name**:", "- **First Name**: Ada")), "Noted.", "Tom."
    )
    first = agent.generate("I am Ada and my cat is called Tom", thread_id="cats", resource_id=me)
    agent.generate("what is my cat called", thread_id="later", resource_id=me)
    return first.messages[0].id


def fields(body: dict) -> dict:
    return {f["name"]: f["value"] for f in body["fields"]}


def test_the_view_shows_fields_and_recent_recalls_with_why(owner_client, remembered, user):
    response = owner_client.get(MEMORY, {"agent": AGENT})
    assert response.status_code == 200
    body = response.json()
    assert body["resource_id"] == str(user.pk) and body["mode"] == "markdown" and body["version"] == 1
    assert list(fields(body))[:3] == ["First Name", "Last Name", "Location"]
    assert fields(body)["First Name"] == "Ada" and body["pinned"] == [] and body["excluded"] == []
    recall = next(r for r in body["recalls"] if r["message_id"] == remembered)
    turn = models.TurnRecord.objects.get(thread_id="later")
    assert recall["thread_id"] == "cats" and recall["turn_thread_id"] == "later"
    assert recall["turn_id"] == str(turn.pk) and isinstance(recall["score"], float)
    assert recall["excerpt"] == "I am Ada and my cat is called Tom" and recall["role"] == "user"
    assert recall["recall_excluded"] is False


def test_a_user_without_memory_sees_the_template_fields(owner_client):
    body = owner_client.get(MEMORY).json()
    assert body["version"] == 0 and body["recalls"] == [] and fields(body)["First Name"] == ""


def test_a_correction_is_a_user_revision_and_reaches_the_next_prompt(
    owner_client, remembered, agent, model, user
):
    response = owner_client.put(
        field_url("First Name") + f"?agent={AGENT}", {"value": "Adeline"}, format="json"
    )
    assert response.status_code == 200, response.content
    assert fields(response.json())["First Name"] == "Adeline"
    revision = models.WorkingMemoryRevision.objects.order_by("-version").first()
    assert (revision.source, revision.actor, revision.version) == ("user", user, 2)
    assert revision.get_source_display() == "User (memory view)"
    model.add("Hello Adeline")
    agent.generate("hi", thread_id="cats", resource_id=str(user.pk))
    assert "- **First Name**: Adeline" in wm_system(model)


def test_bad_values_are_400_and_unknown_fields_404(owner_client, schema_agent):
    url = field_url("age") + "?agent=memory-view-schema"
    response = owner_client.put(url, {"value": "old"}, format="json")
    assert response.status_code == 400 and "value" in response.json()
    assert owner_client.put(url, {}, format="json").status_code == 400
    assert owner_client.put(url, ["x"], format="json").status_code == 400
    assert owner_client.put(url, {"value": 36}, format="json").json()["working_memory"] == {"age": 36}
    assert owner_client.put(field_url("First Name"), {"value": 3}, format="json").status_code == 400
    assert owner_client.put(field_url("First Name"), {"value": "a\x00b"}, format="json").status_code == 400
    assert owner_client.put(field_url("Nope"), {"value": "x"}, format="json").status_code == 404
    assert owner_client.post(field_url("Nope", "pin")).status_code == 404
    assert owner_client.get(MEMORY, {"agent": "no-such-agent"}).status_code == 400
    assert not models.WorkingMemoryRevision.objects.exclude(new__contains="36").exists()


def test_a_pinned_field_is_kept_when_the_model_updates_it(owner_client, remembered, agent, model, user):
    response = owner_client.post(field_url("First Name", "pin") + f"?agent={AGENT}")
    assert response.status_code == 200 and response.json()["pinned"] == ["First Name"]
    assert next(f for f in response.json()["fields"] if f["name"] == "First Name")["pinned"] is True
    changed = DEFAULT_TEMPLATE.replace("- **First Name**:", "- **First Name**: Bob").replace(
        "- **Location**:", "- **Location**: Oslo"
    )
    model.add(update(changed), "ok")
    agent.generate("call me Bob, I live in Oslo", thread_id="cats", resource_id=str(user.pk))
    assert "keep them as they are: First Name" in wm_system(model, 0 - 2)
    tool_result = next(m for m in model.requests[-1].messages if m.role == "tool")
    assert "First Name" in str(tool_result.parts[0].result["pinned"])
    stored = models.Resource.objects.get(pk=str(user.pk)).working_memory
    assert "- **First Name**: Ada" in stored and "- **Location**: Oslo" in stored

    assert owner_client.post(field_url("First Name", "unpin")).json()["pinned"] == []
    model.add(update(changed), "ok")
    agent.generate("call me Bob", thread_id="cats", resource_id=str(user.pk))
    assert "- **First Name**: Bob" in models.Resource.objects.get(pk=str(user.pk)).working_memory


def test_an_excluded_message_is_not_recalled_but_stays_in_history(
    owner_client, remembered, agent, model, user, committing
):
    me = str(user.pk)
    response = owner_client.post(message_url(remembered, "exclude"))
    assert response.status_code == 200
    assert [m["message_id"] for m in response.json()["excluded"]] == [remembered]
    assert not models.MessageEmbedding.objects.filter(message__public_id=remembered).exists()
    model.add("I do not know.")
    result = agent.generate("what is my cat called", thread_id="third", resource_id=me)
    assert remembered not in [r["id"] for r in result.memory["recalled"]]
    assert not any("my cat is called Tom" in m.text for m in model.requests[-1].messages)
    history = owner_client.get(f"{API}threads/cats/messages/").json()["results"]
    assert remembered in [m["id"] for m in history]

    with committing():  # it is embedded again after commit
        assert owner_client.post(message_url(remembered, "include")).json()["excluded"] == []
    assert models.MessageEmbedding.objects.filter(message__public_id=remembered).exists()
    model.add("Tom.")
    result = agent.generate("what is my cat called", thread_id="fourth", resource_id=me)
    assert remembered in [r["id"] for r in result.memory["recalled"]]


def test_another_resource_is_404_and_shows_nothing(owner_client, other_client, remembered, other_user, user):
    mine = str(user.pk)
    for client, query in (
        (other_client, {"resource_id": mine}),
        (owner_client, {"resource_id": str(other_user.pk)}),
    ):
        assert client.get(MEMORY, query).status_code == 404
    url = f"?resource_id={mine}"
    assert other_client.put(field_url("First Name") + url, {"value": "x"}, format="json").status_code == 404
    assert other_client.post(field_url("First Name", "pin") + url).status_code == 404
    assert other_client.post(message_url(remembered, "exclude") + url).status_code == 404
    # Another resource's message id, named in one's own resource, is not there.
    assert other_client.post(message_url(remembered, "exclude")).status_code == 404
    theirs = other_client.get(MEMORY).content.decode()
    assert "Ada" not in theirs and remembered not in theirs and "Tom" not in theirs
    assert models.Resource.objects.get(pk=mine).pinned_fields == []
    assert not models.Message.objects.filter(recall_excluded=True).exists()


def test_staff_need_the_admins_permission(staff, remembered, user):
    mine = {"resource_id": str(user.pk)}
    assert client_for(staff).get(MEMORY, mine).status_code == 404
    staff.user_permissions.add(Permission.objects.get(codename="view_thread"))
    staff = type(staff).objects.get(pk=staff.pk)
    assert client_for(staff).get(MEMORY, mine).status_code == 200
    url = field_url("First Name") + f"?resource_id={user.pk}"
    assert client_for(staff).put(url, {"value": "x"}, format="json").status_code == 404
    staff.user_permissions.add(Permission.objects.get(codename="change_thread"))
    staff = type(staff).objects.get(pk=staff.pk)
    assert client_for(staff).put(url, {"value": "x"}, format="json").status_code == 200
    assert client_for(staff).get(MEMORY, {"resource_id": "never-stored"}).status_code == 404


def test_unauthenticated_callers_are_refused(api_client, remembered):
    assert api_client.get(MEMORY).status_code in (401, 403)
    assert api_client.put(field_url("First Name"), {"value": "x"}, format="json").status_code in (401, 403)
    assert api_client.post(message_url(remembered, "exclude")).status_code in (401, 403)


def test_unpinning_before_anything_is_stored_stores_nothing(owner_client, user):
    response = owner_client.post(field_url("First Name", "unpin"))
    assert response.status_code == 200 and response.json()["pinned"] == []
    assert not models.Resource.objects.filter(pk=str(user.pk)).exists()
    assert owner_client.post(field_url("First Name", "pin")).json()["pinned"] == ["First Name"]


# --- forgetting -------------------------------------------------------------------------------------

FORGET = f"{MEMORY}forget/"


def test_forgetting_a_recalled_message_takes_its_fact_back(owner_client, remembered, agent, model, user):
    response = owner_client.post(f"{FORGET}?agent={AGENT}", {"message_ids": [remembered]}, format="json")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["receipt"]["scope"] == "messages" and body["receipt"]["status"] == "done"
    assert (
        body["receipt"]["counts"]["messages"] == 1
        and body["receipt"]["counts"]["working_memory_reverted"] == 1
    )
    assert fields(body)["First Name"] == "" and remembered not in str(body["recalls"])
    assert not models.Message.objects.filter(public_id=remembered).exists()
    receipt = models.ForgetReceipt.objects.get()
    assert receipt.actor == user and receipt.resource_id == str(user.pk)
    model.add("I don't know.")
    agent.generate("what is my cat called", thread_id="later", resource_id=str(user.pk))
    prompt = "\n".join(m.text for m in model.requests[-1].messages)
    assert "Tom" not in prompt.replace("Tom.", "") and "Ada" not in prompt


def test_forgetting_a_thread(owner_client, remembered, user):
    body = owner_client.post(f"{MEMORY}threads/cats/forget/").json()
    assert body["receipt"]["scope"] == "thread"
    assert not models.Thread.objects.filter(public_id="cats").exists()
    assert models.Thread.objects.filter(public_id="later").exists()


@pytest.mark.parametrize(
    "payload",
    [{}, {"message_ids": []}, {"message_ids": "m"}, {"thread_id": "cats"}, [1], "x"],
)
def test_a_bad_forget_is_400_and_forgets_nothing(owner_client, remembered, payload):
    assert owner_client.post(FORGET, payload, format="json").status_code == 400
    assert models.Message.objects.filter(public_id=remembered).exists()


def test_unknown_or_another_resources_ids_are_404_and_forget_nothing(
    owner_client, other_client, remembered, user
):
    assert (
        owner_client.post(FORGET, {"message_ids": [remembered, "no-such"]}, format="json").status_code == 404
    )
    assert other_client.post(FORGET, {"message_ids": [remembered]}, format="json").status_code == 404
    assert other_client.post(f"{MEMORY}threads/cats/forget/?resource_id={user.pk}").status_code == 404
    assert other_client.post(f"{MEMORY}threads/cats/forget/").status_code == 404
    assert models.Message.objects.filter(public_id=remembered).exists()
    assert not models.ForgetReceipt.objects.exists()


def test_staff_also_need_delete_to_forget(staff, remembered, user):
    url = f"{FORGET}?resource_id={user.pk}"
    staff.user_permissions.add(*Permission.objects.filter(codename__in=["view_thread", "change_thread"]))
    staff = type(staff).objects.get(pk=staff.pk)
    assert client_for(staff).post(url, {"message_ids": [remembered]}, format="json").status_code == 404
    staff.user_permissions.add(Permission.objects.get(codename="delete_thread"))
    staff = type(staff).objects.get(pk=staff.pk)
    assert client_for(staff).post(url, {"message_ids": [remembered]}, format="json").status_code == 200
    assert models.ForgetReceipt.objects.get().actor == staff
