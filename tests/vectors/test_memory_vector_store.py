"""Issue 16, item 5: `Memory(vector_store=X)` writes to X, not only searches it.

Before the fix, new messages were embedded into the settings' store (`MessageEmbedding`) while recall
searched X, so nothing saved was ever recalled. A store given as an object cannot travel to a Celery
worker (a task carries JSON): `Memory.save_messages` then embeds in this process after commit; a
dotted path travels in the task's payload; a turn's task names its agent, whose recall store the
worker looks up.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import TestCase

from memproc import Memory, tasks
from memproc.agents import register, unregister
from memproc.messages import Message
from memproc.models import MessageEmbedding, message_key
from memproc.processors.turn import TurnWrites
from memproc.services.recall import messages_embed, sources_embed, sources_for
from memproc.testing import HashEmbedder
from tests.vectors.stores import InMemoryStore, SharedStore

pytestmark = pytest.mark.django_db
R = "user-1"
SHARED = "tests.vectors.stores.SharedStore"


@pytest.fixture(autouse=True)
def _fresh_shared_store() -> Iterator[None]:
    SharedStore.reset()
    yield
    SharedStore.reset()


class Sent:
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def named(self, name: str) -> list[dict[str, Any]]:
        return [kwargs for sent, kwargs in self.calls if sent == name]


@pytest.fixture
def celery_sends(monkeypatch: pytest.MonkeyPatch, settings: Any) -> Sent:
    """BACKGROUND="celery" with `send_task` recorded (what a worker would receive), not sent."""
    celery = pytest.importorskip("celery")
    sent = Sent()

    def send_task(name: str, args: Any = None, kwargs: Any = None, **options: Any) -> None:
        json.dumps(kwargs)  # what goes on the wire must serialise
        sent.calls.append((name, dict(kwargs or {})))

    monkeypatch.setattr(celery.current_app._get_current_object(), "send_task", send_task)
    settings.MEMPROC = {**settings.MEMPROC, "BACKGROUND": "celery"}
    return sent


def save(memory: Memory, texts: list[str], *, thread_id: str = "t1") -> list[Message]:
    messages = [Message.create("user" if i % 2 == 0 else "assistant", t) for i, t in enumerate(texts)]
    with TestCase.captureOnCommitCallbacks(execute=True):
        return memory.save_messages(messages, thread_id=thread_id, resource_id=R)


def recall_texts(memory: Memory, query: str) -> list[str]:
    return [m.text for m in memory.recall(thread_id="new", resource_id=R, query=query, last_messages=0)]


TEXTS = ["my sister Alice plays the cello in Porto", "noted, thank you"]


# --- Memory.save_messages ---------------------------------------------------------------------------


def test_save_messages_writes_to_the_memorys_store_object() -> None:
    store = InMemoryStore()
    memory = Memory(semantic_recall={"top_k": 1, "message_range": 0}, vector_store=store)
    saved = save(memory, TEXTS)

    assert store.message_ids() == {m.id for m in saved}
    assert MessageEmbedding.objects.count() == 0  # nothing went to the settings' store
    assert recall_texts(memory, "who plays the cello?") == [TEXTS[0]]


def test_save_messages_writes_to_the_memorys_store_by_dotted_path() -> None:
    memory = Memory(semantic_recall={"top_k": 1, "message_range": 0}, vector_store=SHARED)
    saved = save(memory, TEXTS)
    assert SharedStore().message_ids() == {m.id for m in saved}
    assert MessageEmbedding.objects.count() == 0
    assert recall_texts(memory, "who plays the cello?") == [TEXTS[0]]


def test_without_a_store_the_settings_store_is_written_as_before() -> None:
    saved = save(Memory(semantic_recall=True), TEXTS)
    assert set(MessageEmbedding.objects.values_list("message__public_id", flat=True)) == {m.id for m in saved}


def test_with_celery_a_dotted_path_store_travels_in_the_task(celery_sends: Sent) -> None:
    memory = Memory(semantic_recall=True, vector_store=SHARED)
    saved = save(memory, TEXTS)
    (kwargs,) = celery_sends.named("memproc.embed_messages")
    assert kwargs == {"message_ids": [message_key(R, m.id) for m in saved], "vector_store": SHARED}
    assert not SharedStore().rows  # the worker's job

    tasks.TASKS["memproc.embed_messages"](**kwargs)  # what the worker runs

    assert SharedStore().message_ids() == {m.id for m in saved}
    assert MessageEmbedding.objects.count() == 0


def test_with_celery_a_store_object_is_written_in_this_process(celery_sends: Sent) -> None:
    """An object cannot be sent to a worker; rather than let the worker write to the settings' store,
    the embedding runs here, after commit."""
    store = InMemoryStore()
    saved = save(Memory(semantic_recall=True, vector_store=store), TEXTS)
    assert celery_sends.calls == []
    assert store.message_ids() == {m.id for m in saved}
    assert MessageEmbedding.objects.count() == 0


def test_with_celery_an_embedder_object_is_used_in_this_process_too(celery_sends: Sent) -> None:
    embedder = HashEmbedder(dimensions=16)
    saved = save(Memory(semantic_recall=True, embedder=embedder), TEXTS)
    assert celery_sends.calls == []
    assert set(
        MessageEmbedding.objects.filter(model="hash-16").values_list("message__public_id", flat=True)
    ) == {m.id for m in saved}


def test_bulk_import_defers_the_index_of_the_memorys_store() -> None:
    store = InMemoryStore()
    memory = Memory(semantic_recall=True, vector_store=store)
    with memory.bulk_import():
        saved = save(memory, TEXTS)
    assert store.deferred == [("hash-64", 64)]
    assert store.message_ids() == {m.id for m in saved}
    assert MessageEmbedding.objects.count() == 0


# --- the services -----------------------------------------------------------------------------------


def test_sources_embed_and_messages_embed_take_a_store() -> None:
    saved = Memory().save_messages(
        [Message.create("user", t) for t in TEXTS], thread_id="t1", resource_id=R, embed=False
    )
    store = InMemoryStore()
    sources_embed(
        sources=sources_for(saved[:1], thread_id="t1", resource_id=R), embedder=None, vector_store=store
    )
    assert store.message_ids() == {saved[0].id}
    assert messages_embed(message_keys=[message_key(R, saved[1].id)], vector_store=SHARED) == 1
    assert SharedStore().message_ids() == {saved[1].id}
    assert MessageEmbedding.objects.count() == 0


# --- a turn -------------------------------------------------------------------------------------------


@pytest.fixture
def registered() -> Iterator[Any]:
    ids: list[str] = []

    def add(agent: Any) -> Any:
        register(agent, replace=True)
        ids.append(agent.id)
        return agent

    yield add
    for agent_id in ids:
        unregister(agent_id)


@pytest.mark.xfail(
    not hasattr(TurnWrites(), "vector_store"),
    reason="needs TurnWrites.vector_store, set by SemanticRecall and passed on by turns._enqueue_embedding",
    strict=True,
)
def test_a_turn_embeds_into_the_memorys_store(make_agent, model) -> None:
    store = InMemoryStore()
    agent = make_agent(memory=Memory(last_messages=0, semantic_recall={"top_k": 1}, vector_store=store))
    model.add("Lovely", "She plays the cello")
    first = agent.generate(TEXTS[0], thread_id="t1", resource_id=R)

    assert store.message_ids() == {m.id for m in first.messages}
    assert MessageEmbedding.objects.count() == 0
    agent.generate("what does Alice play?", thread_id="t2", resource_id=R)
    assert any(TEXTS[0] in m.text for m in model.requests[-1].messages)  # recalled from the store


def test_with_celery_a_turns_task_embeds_into_its_agents_store(make_agent, model, celery_sends, registered):
    store = InMemoryStore()
    agent = registered(make_agent(id="own-store", memory=Memory(semantic_recall=True, vector_store=store)))
    model.add("Lovely")
    result = agent.generate(TEXTS[0], thread_id="t1", resource_id=R)
    (kwargs,) = celery_sends.named("memproc.embed_messages")
    assert kwargs == {"message_ids": [message_key(R, m.id) for m in result.messages], "agent_id": "own-store"}

    tasks.TASKS["memproc.embed_messages"](**kwargs)  # the worker finds the agent, and its store

    assert store.message_ids() == {m.id for m in result.messages}
    assert MessageEmbedding.objects.count() == 0


def test_a_task_for_an_agent_without_a_store_of_its_own_uses_the_settings_store(
    make_agent, model, celery_sends, registered
):
    agent = registered(make_agent(id="default-store", memory=Memory(semantic_recall=True)))
    model.add("Lovely")
    result = agent.generate(TEXTS[0], thread_id="t1", resource_id=R)
    tasks.TASKS["memproc.embed_messages"](**celery_sends.named("memproc.embed_messages")[0])
    assert MessageEmbedding.objects.count() == len(result.messages)


def test_the_store_named_in_a_task_wins_over_the_agents(make_agent, model, registered):
    store = InMemoryStore()
    registered(make_agent(id="named", memory=Memory(semantic_recall=True, vector_store=store)))
    saved = Memory().save_messages(
        [Message.create("user", TEXTS[0])], thread_id="t1", resource_id=R, embed=False
    )
    tasks.TASKS["memproc.embed_messages"](message_ids=[saved[0].id], agent_id="named", vector_store=SHARED)
    assert SharedStore().message_ids() == {saved[0].id} and not store.rows
