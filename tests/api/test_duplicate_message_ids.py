"""Client-chosen message ids that are already stored (issue #16): a resent message with the same
content is already saved (the turn goes on); other content, or an id stored in another of the caller's
threads, is a 409 on `messages` with nothing saved; concurrent requests with one id never answer 500.
Another user's ids are not there for the caller (a message id names a message within its resource):
choosing one answers as any unused id does. The Python API raises `MessageConflict`, never
`IntegrityError`."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import IntegrityError, connections

from memproc import Memory, models
from memproc.exceptions import MessageConflict, ValidationError
from memproc.llm.types import ModelRequest
from memproc.messages import Message
from memproc.services.messages import messages_save
from memproc.testing import ScriptedModel
from tests.api.conftest import API, client_for

GENERATE = API + "agents/api-test/generate/"
STREAM = API + "agents/api-test/stream/"


def hi(text: str = "hi", message_id: str = "m1") -> list[dict[str, str]]:
    return [{"id": message_id, "role": "user", "content": text}]


def stored() -> list[tuple[str, str, str]]:
    return list(
        models.Message.objects.order_by("thread_id", "sequence").values_list(
            "public_id", "thread__public_id", "text"
        )
    )


# --- one request after another ----------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_same_message_sent_twice_is_saved_once_and_the_turn_goes_on(owner_client, agent, model, thread):
    model.add("first answer", "second answer")
    first = owner_client.post(GENERATE, {"messages": hi(), "thread_id": thread.public_id}, format="json")
    again = owner_client.post(GENERATE, {"messages": hi(), "thread_id": thread.public_id}, format="json")
    assert first.status_code == again.status_code == 200, again.content
    assert again.json()["text"] == "second answer"
    assert [m["id"] for m in again.json()["messages"]] != ["m1"]  # m1 is not saved again
    assert models.Message.objects.filter(public_id="m1").count() == 1
    assert [text for _, _, text in stored()] == ["hi", "first answer", "second answer"]


@pytest.mark.django_db
@pytest.mark.parametrize("url", [GENERATE, STREAM])
def test_the_same_id_with_other_content_is_a_409_and_saves_nothing(owner_client, agent, model, thread, url):
    model.add("first answer")
    owner_client.post(GENERATE, {"messages": hi(), "thread_id": thread.public_id}, format="json")
    before = stored()
    response = owner_client.post(
        url, {"messages": hi("something else"), "thread_id": thread.public_id}, format="json"
    )
    assert response.status_code == 409, response.content
    assert response["Content-Type"] == "application/json"
    assert set(response.json()) == {"messages"} and "m1" in response.json()["messages"][0]
    assert stored() == before and model.calls == 1


@pytest.mark.django_db
def test_an_id_in_another_of_ones_threads_is_a_409(owner_client, agent, model, thread):
    model.add("first answer")
    owner_client.post(GENERATE, {"messages": hi(), "thread_id": thread.public_id}, format="json")
    for other in ("another-thread", None):  # an existing thread of someone else, or a new one
        body = {"messages": hi(), "thread_id": other} if other else {"messages": hi()}
        response = owner_client.post(GENERATE, body, format="json")
        assert response.status_code == 409, response.content
    assert model.calls == 1 and models.Thread.objects.count() == 1


@pytest.mark.django_db
def test_an_echoed_conversation_still_loses_to_the_stored_copy(owner_client, agent, model, thread):
    """Rule 11: messages before the request's last answer are the client's copy of the thread."""
    model.add("first answer", "second answer")
    first = owner_client.post(
        GENERATE, {"messages": hi(), "thread_id": thread.public_id}, format="json"
    ).json()
    answer = first["messages"][-1]
    echoed = [
        {"id": "m1", "role": "user", "content": "hi, as the client remembers it"},
        {"id": answer["id"], "role": "assistant", "content": first["text"]},
        {"id": "m2", "role": "user", "content": "and now?"},
    ]
    response = owner_client.post(GENERATE, {"messages": echoed, "thread_id": thread.public_id}, format="json")
    assert response.status_code == 200, response.content
    assert [text for _, _, text in stored()] == ["hi", "first answer", "and now?", "second answer"]


@pytest.mark.django_db
def test_only_client_chosen_ids_are_looked_up(owner_client, agent, model, thread, memproc_connection):
    from django.test.utils import CaptureQueriesContext

    def lookups(messages: Any) -> int:
        with CaptureQueriesContext(memproc_connection) as queries:
            owner_client.post(GENERATE, {"messages": messages, "thread_id": thread.public_id}, format="json")
        return len([q for q in queries if '"content" FROM "memproc_message"' in q["sql"]])

    model.add("one", "two")
    assert lookups("hi") == 0
    assert lookups(hi()) == 1


# --- a request that loses the race --------------------------------------------------------------------------


def saving_m1_meanwhile(thread_id: str, resource_id: str, text: str = "hi"):
    """A model answer during which another request saves m1 (after this turn's checks)."""

    def answer(request: ModelRequest) -> str:
        messages_save(
            thread_id=thread_id, resource_id=resource_id, messages=[Message.create("user", text, id="m1")]
        )
        return "an answer that must not be saved"

    return answer


@pytest.mark.django_db
@pytest.mark.parametrize("url", [GENERATE, STREAM])
def test_losing_the_race_for_an_id_is_a_409_not_a_500(owner_client, agent, model, thread, url):
    model.add(saving_m1_meanwhile(thread.public_id, thread.resource_id))
    response = owner_client.post(url, {"messages": hi(), "thread_id": thread.public_id}, format="json")
    if url == STREAM:  # the turn saves after its first event: the stream ends with an error event
        assert response.status_code == 200
        last = b"".join(response.streaming_content).decode().strip().split("\n\n")[-1]
        assert last.startswith("event: error") and '"code":"message_conflict"' in last
    else:
        assert response.status_code == 409 and set(response.json()) == {"messages"}
    assert stored() == [("m1", thread.public_id, "hi")]  # the winner's; nothing of this turn
    assert not models.TurnRecord.objects.filter(status="completed").exists()


@pytest.mark.django_db
def test_the_python_api_raises_message_conflict(make_agent, model):
    agent = make_agent()
    model.add("first", saving_m1_meanwhile("t-py", "r-py", text="hi from elsewhere"))
    agent.generate([{"id": "m0", "role": "user", "content": "start"}], thread_id="t-py", resource_id="r-py")
    with pytest.raises(MessageConflict) as caught:
        agent.generate([{"id": "m1", "role": "user", "content": "hi"}], thread_id="t-py", resource_id="r-py")
    assert isinstance(caught.value, ValidationError) and not isinstance(caught.value, IntegrityError)
    assert isinstance(caught.value.__cause__, IntegrityError)
    assert [t for _, _, t in stored()] == ["start", "first", "hi from elsewhere"]


@pytest.mark.django_db
def test_memory_save_messages_refuses_an_id_of_another_thread(db):
    memory = Memory()
    memory.save_messages([Message.create("user", "hi", id="m1")], thread_id="t-a", resource_id="r")
    memory.save_messages([Message.create("user", "changed", id="m1")], thread_id="t-a", resource_id="r")
    with pytest.raises(MessageConflict):
        memory.save_messages([Message.create("user", "hi", id="m1")], thread_id="t-b", resource_id="r")
    assert stored() == [("m1", "t-a", "hi")]


# --- two requests at once ------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("thread_id", ["shared", None])
def test_two_requests_with_one_id_at_once_never_answer_500(make_agent, user, resource, thread_id):
    both_in_the_model = threading.Barrier(2, timeout=10)

    def answer(request: ModelRequest) -> str:
        both_in_the_model.wait()  # both turns passed their checks: the save decides
        return "answer"

    model = ScriptedModel([answer, answer])
    make_agent(model=model)
    body: dict[str, Any] = {"messages": hi()}
    if thread_id:
        body["thread_id"] = thread_id
    results: list[Any] = [None, None]

    def send(i: int) -> None:
        try:
            results[i] = client_for(user).post(GENERATE, body, format="json")
        except Exception as exc:  # noqa: BLE001 - a 500 surfaces here; the assertion reports it
            results[i] = exc
        finally:
            connections.close_all()

    threads = [threading.Thread(target=send, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    statuses = sorted((getattr(r, "status_code", repr(r)) for r in results), key=str)
    assert statuses == [200, 409], results
    loser = next(r for r in results if r.status_code == 409)
    assert set(loser.json()) == {"messages"}
    assert models.Message.objects.filter(public_id="m1").count() == 1
    assert models.Message.objects.count() == 2  # the winner's turn, once
