"""SemanticRecall, translated from Mastra's suite: top_k, threshold, scope, message_range,
cross-thread system message, graceful failure — on SQLite (NumPy search) and PostgreSQL (pgvector)."""

from __future__ import annotations

import pytest

from memproc import Memory
from memproc.messages import Message
from memproc.processors.semantic_recall import CROSS_THREAD_HEADER
from memproc.testing import ScriptedModel

pytestmark = pytest.mark.django_db
R = "user-1"

TOPICS = [
    "my favourite colour is deep ocean blue",
    "the weather in the mountains was cold",
    "I adopted a golden retriever puppy named Max",
    "quarterly revenue grew by twelve percent",
    "the recipe needs two cups of flour and sugar",
    "our flight to Lisbon leaves at noon",
]


def seed(
    memory: Memory, committing, *, thread_id: str, texts: list[str], resource_id: str = R
) -> list[Message]:
    messages = [Message.create("user" if i % 2 == 0 else "assistant", t) for i, t in enumerate(texts)]
    with committing():
        memory.save_messages(messages, thread_id=thread_id, resource_id=resource_id)
    return messages


def filler(n: int, prefix: str = "filler") -> list[str]:
    return [f"{prefix} number {i} about nothing" for i in range(n)]


def system_texts(model: ScriptedModel) -> list[str]:
    return [m.text for m in model.requests[-1].messages if m.role == "system"]


def history_texts(model: ScriptedModel) -> list[str]:
    return [m.text for m in model.requests[-1].messages if m.role != "system"]


def test_recall_finds_old_same_thread_message_outside_the_window(make_agent, model, committing):
    memory = Memory(last_messages=2, semantic_recall={"top_k": 1, "message_range": 0})
    seed(memory, committing, thread_id="t1", texts=[TOPICS[2], *filler(8)])
    model.add("ok")
    make_agent(memory=memory).generate("what is my puppy named Max", thread_id="t1", resource_id=R)
    texts = history_texts(model)
    assert texts[0] == TOPICS[2]  # recalled, placed in time order before the window
    assert texts[1:] == [
        "filler number 6 about nothing",
        "filler number 7 about nothing",
        "what is my puppy named Max",
    ]


def test_message_range_brings_neighbours_from_the_hit_thread(make_agent, model, committing):
    memory = Memory(last_messages=1, semantic_recall={"top_k": 1, "message_range": {"before": 1, "after": 2}})
    seed(memory, committing, thread_id="t1", texts=[*filler(3, "a"), TOPICS[5], *filler(6, "b")])
    model.add("ok")
    make_agent(memory=memory).generate("when does the flight to Lisbon leave", thread_id="t1", resource_id=R)
    assert history_texts(model)[:4] == [
        "a number 2 about nothing",
        TOPICS[5],
        "b number 0 about nothing",
        "b number 1 about nothing",
    ]


def test_top_k_limits_hits(make_agent, model, committing):
    memory = Memory(last_messages=0, semantic_recall={"top_k": 2, "message_range": 0})
    seed(memory, committing, thread_id="t1", texts=TOPICS)
    model.add("ok")
    make_agent(memory=memory).generate("blue colour puppy flour", thread_id="t1", resource_id=R)
    assert len(history_texts(model)) == 3


def test_threshold_drops_weak_matches(make_agent, model, committing):
    memory = Memory(last_messages=0, semantic_recall={"top_k": 4, "message_range": 0, "threshold": 0.99})
    seed(memory, committing, thread_id="t1", texts=TOPICS)
    model.add("ok")
    make_agent(memory=memory).generate("the weather in the mountains", thread_id="t1", resource_id=R)
    assert history_texts(model) == ["the weather in the mountains"]


def test_other_threads_go_into_one_marked_system_message(make_agent, model, committing):
    memory = Memory(last_messages=5, semantic_recall={"top_k": 2, "message_range": 0})
    seed(memory, committing, thread_id="old", texts=[TOPICS[0], TOPICS[3]])
    model.add("ok")
    make_agent(memory=memory).generate("what is my favourite colour", thread_id="new", resource_id=R)
    recalled = [t for t in system_texts(model) if t.startswith(CROSS_THREAD_HEADER)]
    assert len(recalled) == 1 and TOPICS[0] in recalled[0]
    assert history_texts(model) == ["what is my favourite colour"]


def test_thread_scope_ignores_other_threads(make_agent, model, committing):
    memory = Memory(last_messages=0, semantic_recall={"scope": "thread", "message_range": 0})
    seed(memory, committing, thread_id="old", texts=[TOPICS[0]])
    model.add("ok")
    make_agent(memory=memory).generate("favourite colour blue", thread_id="new", resource_id=R)
    assert not any(CROSS_THREAD_HEADER in t for t in system_texts(model))


def test_resource_scope_never_crosses_to_another_resource(make_agent, model, committing):
    memory = Memory(last_messages=0, semantic_recall=True)
    seed(memory, committing, thread_id="theirs", texts=[TOPICS[0]], resource_id="someone-else")
    model.add("ok")
    make_agent(memory=memory).generate("favourite colour deep ocean blue", thread_id="mine", resource_id=R)
    assert TOPICS[0] not in " ".join(system_texts(model) + history_texts(model))


def test_messages_already_in_the_window_are_not_repeated(make_agent, model, committing):
    memory = Memory(last_messages=10, semantic_recall={"top_k": 3, "message_range": 1})
    seed(memory, committing, thread_id="t1", texts=TOPICS[:4])
    model.add("ok")
    make_agent(memory=memory).generate("colour blue", thread_id="t1", resource_id=R)
    texts = history_texts(model)
    assert len(texts) == len(set(texts)) == 5


def test_turns_are_embedded_and_recalled_later(make_agent, model):
    agent = make_agent(memory=Memory(last_messages=1, semantic_recall={"top_k": 1, "message_range": 0}))
    model.add("noted", "ok", "ok", "ok")
    agent.generate("my locker code is seven seven three", thread_id="t1", resource_id=R)
    agent.generate("unrelated chatter", thread_id="t1", resource_id=R)
    agent.generate("more chatter", thread_id="t1", resource_id=R)
    agent.generate("what is my locker code", thread_id="t1", resource_id=R)
    assert "my locker code is seven seven three" in history_texts(model)


def test_recall_failure_is_logged_and_the_turn_goes_on(make_agent, model, caplog):
    class Broken:
        id = "broken"
        dimensions = 8

        def embed(self, texts):
            raise ConnectionError("embedder down")

    model.add("still answered")
    result = make_agent(memory=Memory(semantic_recall=True, embedder=Broken())).generate(
        "hello", thread_id="t1", resource_id=R
    )
    assert result.text == "still answered" and result.memory.get("recall_error") is True
    assert "semantic recall failed" in caplog.text


def test_memory_recall_api_returns_time_ordered_messages(committing):
    memory = Memory(last_messages=2, semantic_recall={"top_k": 1, "message_range": 0})
    seed(memory, committing, thread_id="t1", texts=[TOPICS[4], *filler(4)])
    found = memory.recall(thread_id="t1", resource_id=R, query="cups of flour")
    assert [m.text for m in found] == [
        TOPICS[4],
        "filler number 2 about nothing",
        "filler number 3 about nothing",
    ]


@pytest.mark.slow
def test_minilm_recalls_a_paraphrase_over_an_unrelated_message(make_agent, model, committing):
    from memproc.embedders import MiniLMEmbedder

    memory = Memory(
        last_messages=0, semantic_recall={"top_k": 1, "message_range": 0}, embedder=MiniLMEmbedder()
    )
    seed(
        memory,
        committing,
        thread_id="t1",
        texts=["The weather is sunny today", "I forgot my login credentials"],
    )
    model.add("ok")
    make_agent(memory=memory).generate("How do I reset my password?", thread_id="t2", resource_id=R)
    recalled = next(t for t in system_texts(model) if t.startswith(CROSS_THREAD_HEADER))
    assert "login credentials" in recalled and "sunny" not in recalled


def test_the_turns_user_text_is_embedded_once_for_search_and_storage(make_agent, model) -> None:
    from tests.memory.embedders import CountingEmbedder

    embedder = CountingEmbedder()
    agent = make_agent(memory=Memory(last_messages=4, semantic_recall=True, embedder=embedder))
    model.add("the answer")
    agent.generate("  a question about  otters ", thread_id="t1", resource_id=R)
    assert sorted(embedder.texts) == ["a question about  otters", "the answer"]
    long_text = "word " * 400  # more than one chunk: the query is embedded whole, chunks separately
    model.add("again")
    agent.generate(long_text, thread_id="t1", resource_id=R)
    assert embedder.texts.count(long_text) == 1 and "again" in embedder.texts
