"""A turn's thread is read once per request: the view resolves it (ownership, title, last sequence,
its working memory) and hands it to the turn, which does not read it again (the renovation issue:
the view, the store and the serializer each read it). Counted on every endpoint that runs a turn, as
an upper bound; what the turn then saves and sees must be the same as before."""

from typing import Any

import pytest
from django.test.utils import CaptureQueriesContext

from memproc import Memory
from memproc.models import Message, Thread
from memproc.turns.input import ThreadRef, TurnInput
from tests.api.conftest import API

pytestmark = pytest.mark.django_db

ENDPOINTS = {
    "generate": lambda c, n: c.post(API + "agents/api-test/generate/", {"messages": "again", "thread_id": "t1"}, format="json"),
    "stream": lambda c, n: c.post(API + "agents/api-test/stream/", {"messages": "again", "thread_id": "t1"}, format="json"),
    "chat/completions": lambda c, n: c.post(
        API + "v1/chat/completions",
        {"model": "api-test", "messages": [{"role": "user", "content": "again"}], "metadata": {"thread_id": "t1"}},
        format="json",
    ),
    "aisdk chat": lambda c, n: c.post(
        API + "agents/api-test/chat/",
        {"id": "t1", "trigger": "submit-message",
         "messages": [{"id": f"u{n}", "role": "user", "parts": [{"type": "text", "text": "again"}]}]},
        format="json",
    ),
}  # fmt: skip


def thread_reads(queries: list[dict[str, Any]]) -> list[str]:
    return [
        q["sql"] for q in queries if q["sql"].startswith("SELECT") and 'FROM "memproc_thread"' in q["sql"]
    ]


def drain(response: Any) -> None:
    if getattr(response, "streaming", False):
        b"".join(response.streaming_content)


@pytest.mark.parametrize("endpoint", sorted(ENDPOINTS))
def test_an_existing_thread_is_read_once_per_turn(
    endpoint: str, owner_client: Any, make_agent: Any, model: Any, resource: Any, memproc_connection: Any
) -> None:
    make_agent(memory=Memory(last_messages=10, working_memory={"scope": "thread"}))
    model.add("first answer", "second answer")
    drain(ENDPOINTS[endpoint](owner_client, 1))  # creates the thread
    with CaptureQueriesContext(memproc_connection) as queries:
        response = ENDPOINTS[endpoint](owner_client, 2)
        drain(response)
    assert response.status_code == 200, response.content
    assert len(thread_reads(queries.captured_queries)) == 1, thread_reads(queries.captured_queries)
    # ...and the turn saw its history and saved after it, as when it read the thread itself.
    texts = [m.text for m in Message.objects.filter(thread__public_id="t1").order_by("sequence")]
    assert texts == ["again", "first answer", "again", "second answer"]
    assert [m.text for m in model.requests[-1].messages if m.role != "system"][:3] == texts[:3]


def test_a_stale_thread_ref_still_saves_in_order(agent: Any, model: Any, resource: Any) -> None:
    """A request that read the thread, then was overtaken by another turn, saves after it: the
    reference's last sequence is only the save's first guess."""
    model.add("one", "two")
    agent.generate("first", thread_id="t9", resource_id=resource.pk)
    ref = ThreadRef.of(Thread.objects.get(public_id="t9"), thread_id="t9", resource_id=resource.pk)
    agent.memory.save_messages(
        [{"role": "user", "content": "meanwhile"}], thread_id="t9", resource_id=resource.pk
    )
    from memproc.turns.sync import turn_run

    turn_run(agent.plan(), TurnInput.of("late"), thread_id="t9", resource_id=resource.pk, thread=ref)
    stored = list(
        Message.objects.filter(thread__public_id="t9").order_by("sequence").values_list("sequence", "text")
    )
    assert stored == [(1, "first"), (2, "one"), (3, "meanwhile"), (4, "late"), (5, "two")]


def test_turn_input_keeps_the_ids_the_caller_chose() -> None:
    given = TurnInput.of([{"id": "u1", "role": "user", "content": "a"}, {"role": "user", "content": "b"}])
    assert [m.text for m in given.messages] == ["a", "b"]
    assert given.client_ids == frozenset({"u1"})
    assert TurnInput.of(given) is given
    assert TurnInput.of("plain").client_ids == frozenset()
