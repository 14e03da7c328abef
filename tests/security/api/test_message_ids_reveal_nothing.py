"""Message ids reveal nothing across resources (finding 15 of the third hostile review).

Message ids were global: a caller who sent a message under another user's id got a 409, and under an
unused id a 200, so any id could be probed ("does someone have a message `inv-2024-0042`?"). A message
id now names a message within its resource, as a thread id names a thread: another user's ids are
simply not there for the caller. Through each endpoint that takes client message ids, the victim's id
and a never-used id answer alike, the caller's message is saved under the id it chose, and the
victim's message is unchanged.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from memproc import models
from tests.api.conftest import API, client_for
from tests.factories import MessageFactory

AGENT = API + "agents/api-test/"
VICTIM_ID = "inv-2024-0042"
UNUSED_ID = "never-used-anywhere"


def generate(client: Any, message_id: str, thread_id: str) -> Any:
    body = {"messages": [{"id": message_id, "role": "user", "content": "hello"}], "thread_id": thread_id}
    return client.post(AGENT + "generate/", body, format="json")


def stream(client: Any, message_id: str, thread_id: str) -> Any:
    body = {"messages": [{"id": message_id, "role": "user", "content": "hello"}], "thread_id": thread_id}
    return client.post(AGENT + "stream/", body, format="json")


def chat(client: Any, message_id: str, thread_id: str) -> Any:
    ui = {"id": message_id, "role": "user", "parts": [{"type": "text", "text": "hello"}]}
    body = {"id": thread_id, "messages": [ui], "trigger": "submit-message"}
    return client.post(AGENT + "chat/", body, format="json")


def outcome(response: Any) -> tuple[int, str]:
    """The status and the shape of the answer, with the ids and texts that differ by design taken out."""
    body = b"".join(response.streaming_content) if response.streaming else response.content
    text = body.decode()
    for varying in (VICTIM_ID, UNUSED_ID, "t-victim-probe", "t-unused-probe"):
        text = text.replace(varying, "ID")
    try:
        shape = json.dumps(sorted(json.loads(text)))  # JSON: its keys
    except ValueError:
        shape = "\n".join(line.split(":")[0] for line in text.splitlines())  # a stream: its event lines
    return response.status_code, shape


@pytest.mark.django_db
@pytest.mark.parametrize("send", [generate, stream, chat], ids=["generate", "stream", "ai-sdk-chat"])
def test_another_users_message_id_answers_as_an_unused_one(
    send, agent, model, user, other_user, other_thread
):
    victim = MessageFactory(thread=other_thread, id=VICTIM_ID, role="user", text="the victim's words")
    model.add("hi", "hi")
    attacker = client_for(user)

    probed = send(attacker, VICTIM_ID, "t-victim-probe")
    unused = send(attacker, UNUSED_ID, "t-unused-probe")

    assert outcome(probed) == outcome(unused)
    assert probed.status_code == 200, probed.content if not probed.streaming else probed.status_code
    mine = models.Message.objects.get(thread__public_id="t-victim-probe", role="user")
    assert (mine.public_id, mine.resource_id, mine.text) == (VICTIM_ID, str(user.pk), "hello")
    victim.refresh_from_db()
    assert (victim.public_id, victim.thread_id, victim.text) == (
        VICTIM_ID,
        other_thread.pk,
        "the victim's words",
    )
    assert "the victim's words" not in str(model.requests)


@pytest.mark.django_db
def test_an_id_in_another_of_ones_own_threads_is_still_a_conflict(agent, model, user, thread):
    """Within one resource ids stay unique: the caller's own reuse is reported, as before."""
    model.add("hi")
    assert generate(client_for(user), "mine-1", thread.public_id).status_code == 200
    again = generate(client_for(user), "mine-1", "another-thread")
    assert again.status_code == 409 and "mine-1" in again.json()["messages"][0]


@pytest.mark.django_db
def test_both_resources_keep_their_own_message_under_the_same_id(agent, model, user, other_user):
    model.add("one", "two")
    for who in (user, other_user):
        assert generate(client_for(who), "shared-id", "t1").status_code == 200
    rows = models.Message.objects.filter(public_id="shared-id").order_by("resource_id")
    assert sorted(r.resource_id for r in rows) == sorted([str(user.pk), str(other_user.pk)])
    for who in (user, other_user):
        listed = client_for(who).get(API + "threads/t1/messages/").json()["results"]
        assert [m["id"] for m in listed][0] == "shared-id"  # each sees their own, by the id they chose
