"""Archived threads: `Memory.archive_thread` / `unarchive_thread`, and semantic recall, which leaves
other threads that are archived out unless the agent includes them (`include_archived`). A turn in
an archived thread runs, recalls its own messages and leaves the thread archived. On SQLite (NumPy
search) and PostgreSQL (pgvector): `--db=postgres`."""

from __future__ import annotations

import pytest

from memproc import Memory
from memproc.exceptions import ConfigurationError, ThreadNotFoundError
from memproc.processors.semantic_recall import CROSS_THREAD_HEADER, SemanticRecall
from memproc.selectors.threads import threads_archived
from tests.memory.test_semantic_recall import TOPICS, R, filler, history_texts, seed, system_texts

pytestmark = pytest.mark.django_db

QUESTION = "what is my favourite colour deep ocean blue"


def recalled_from_other_threads(model) -> str:
    return " ".join(t for t in system_texts(model) if t.startswith(CROSS_THREAD_HEADER))


def test_archive_and_unarchive_a_thread(committing):
    memory = Memory()
    memory.create_thread(resource_id=R, thread_id="t1")
    thread = memory.archive_thread("t1", resource_id=R)
    assert thread.archived_at is not None
    assert memory.get_thread("t1", resource_id=R).archived_at == thread.archived_at
    assert threads_archived(resource_id=R) == ["t1"]
    assert memory.archive_thread("t1", resource_id=R).archived_at == thread.archived_at  # idempotent
    assert memory.unarchive_thread("t1", resource_id=R).archived_at is None
    assert memory.get_thread("t1", resource_id=R).archived_at is None
    assert memory.unarchive_thread("t1", resource_id=R).archived_at is None
    assert threads_archived(resource_id=R) == []


def test_archiving_a_missing_thread_is_thread_not_found():
    with pytest.raises(ThreadNotFoundError):
        Memory().archive_thread("nope", resource_id=R)
    with pytest.raises(ThreadNotFoundError):
        Memory().unarchive_thread("nope", resource_id=R)


def test_another_resources_thread_of_the_same_id_stays_as_it_was():
    memory = Memory()
    memory.create_thread(resource_id=R, thread_id="t1")
    memory.create_thread(resource_id="someone-else", thread_id="t1")
    memory.archive_thread("t1", resource_id=R)
    assert memory.get_thread("t1", resource_id="someone-else").archived_at is None


def test_recall_leaves_archived_threads_out_by_default(make_agent, model, committing):
    memory = Memory(last_messages=5, semantic_recall={"top_k": 2, "message_range": 0})
    seed(memory, committing, thread_id="old", texts=[TOPICS[0], TOPICS[3]])
    memory.archive_thread("old", resource_id=R)
    model.add("ok")
    make_agent(memory=memory).generate(QUESTION, thread_id="new", resource_id=R)
    assert TOPICS[0] not in recalled_from_other_threads(model)
    assert TOPICS[0] not in " ".join(history_texts(model))


def test_recall_fills_its_top_k_from_threads_that_are_not_archived(make_agent, model, committing):
    memory = Memory(last_messages=0, semantic_recall={"top_k": 1, "message_range": 0})
    seed(memory, committing, thread_id="old", texts=[TOPICS[0]])
    seed(memory, committing, thread_id="kept", texts=["deep ocean blue is a colour I like"])
    memory.archive_thread("old", resource_id=R)
    model.add("ok")
    make_agent(memory=memory).generate(QUESTION, thread_id="new", resource_id=R)
    recalled = recalled_from_other_threads(model)
    assert "deep ocean blue is a colour I like" in recalled and TOPICS[0] not in recalled


def test_recall_includes_archived_threads_when_the_agent_says_so(make_agent, model, committing):
    memory = Memory(
        last_messages=5, semantic_recall={"top_k": 2, "message_range": 0, "include_archived": True}
    )
    seed(memory, committing, thread_id="old", texts=[TOPICS[0], TOPICS[3]])
    memory.archive_thread("old", resource_id=R)
    model.add("ok")
    make_agent(memory=memory).generate(QUESTION, thread_id="new", resource_id=R)
    assert TOPICS[0] in recalled_from_other_threads(model)


def test_a_per_call_option_includes_archived_threads(make_agent, model, committing):
    memory = Memory(last_messages=5, semantic_recall={"top_k": 2, "message_range": 0})
    seed(memory, committing, thread_id="old", texts=[TOPICS[0], TOPICS[3]])
    memory.archive_thread("old", resource_id=R)
    model.add("ok")
    make_agent(memory=memory).generate(
        QUESTION,
        thread_id="new",
        resource_id=R,
        memory_options={"semantic_recall": {"include_archived": True}},
    )
    assert TOPICS[0] in recalled_from_other_threads(model)


def test_unarchived_threads_are_recalled_again(make_agent, model, committing):
    memory = Memory(last_messages=5, semantic_recall={"top_k": 2, "message_range": 0})
    seed(memory, committing, thread_id="old", texts=[TOPICS[0], TOPICS[3]])
    memory.archive_thread("old", resource_id=R)
    memory.unarchive_thread("old", resource_id=R)
    model.add("ok")
    make_agent(memory=memory).generate(QUESTION, thread_id="new", resource_id=R)
    assert TOPICS[0] in recalled_from_other_threads(model)


def test_a_turn_in_an_archived_thread_recalls_its_own_messages(make_agent, model, committing):
    memory = Memory(last_messages=2, semantic_recall={"top_k": 1, "message_range": 0})
    seed(memory, committing, thread_id="old", texts=[TOPICS[2], *filler(8)])
    archived_at = memory.archive_thread("old", resource_id=R).archived_at
    model.add("ok")
    result = make_agent(memory=memory).generate("what is my puppy named Max", thread_id="old", resource_id=R)
    assert result.text == "ok"
    assert history_texts(model)[0] == TOPICS[2]
    # The turn is stored, and the thread stays archived.
    thread = memory.get_thread("old", resource_id=R)
    assert thread.archived_at == archived_at
    assert list(thread.messages.order_by("-sequence").values_list("text", flat=True)[:2]) == [
        "ok",
        "what is my puppy named Max",
    ]


def test_thread_scope_recall_in_an_archived_thread_is_unchanged(make_agent, model, committing):
    memory = Memory(last_messages=1, semantic_recall={"scope": "thread", "top_k": 1, "message_range": 0})
    seed(memory, committing, thread_id="old", texts=[TOPICS[5], *filler(4)])
    memory.archive_thread("old", resource_id=R)
    model.add("ok")
    make_agent(memory=memory).generate("when does the flight to Lisbon leave", thread_id="old", resource_id=R)
    assert history_texts(model)[0] == TOPICS[5]


def test_memory_recall_leaves_archived_threads_out_too(committing):
    memory = Memory(last_messages=0, semantic_recall={"top_k": 1, "message_range": 0})
    seed(memory, committing, thread_id="old", texts=[TOPICS[4]])
    memory.create_thread(resource_id=R, thread_id="new")
    assert [m.text for m in memory.recall(thread_id="new", resource_id=R, query="cups of flour")] == [
        TOPICS[4]
    ]
    memory.archive_thread("old", resource_id=R)
    assert memory.recall(thread_id="new", resource_id=R, query="cups of flour") == []


def test_include_archived_is_an_option_of_semantic_recall():
    assert SemanticRecall(include_archived=True).include_archived is True
    assert SemanticRecall().include_archived is False
    with pytest.raises(ConfigurationError):
        Memory(semantic_recall={"include_archive": True})


def test_archived_at_travels_with_the_export(committing):
    from memproc.services.export import resource_import
    from memproc.services.purge import resource_purge

    memory = Memory()
    memory.create_thread(resource_id=R, thread_id="old")
    memory.create_thread(resource_id=R, thread_id="kept")
    archived_at = memory.archive_thread("old", resource_id=R).archived_at
    document = memory.export(resource_id=R)
    exported = {t["id"]: t["archived_at"] for t in document["threads"]}
    assert exported["kept"] is None and exported["old"] is not None
    with committing():
        resource_purge(resource_id=R)
    with committing():
        resource_import(document=document, files={})
    assert memory.get_thread("old", resource_id=R).archived_at == archived_at
    assert memory.get_thread("kept", resource_id=R).archived_at is None


def test_a_document_without_archived_at_imports_threads_not_archived(committing):
    from memproc.services.export import resource_import
    from memproc.services.purge import resource_purge

    memory = Memory()
    memory.create_thread(resource_id=R, thread_id="t1")
    document = memory.export(resource_id=R)
    for thread in document["threads"]:
        del thread["archived_at"]  # as written before threads could be archived
    with committing():
        resource_purge(resource_id=R)
    with committing():
        resource_import(document=document, files={})
    assert memory.get_thread("t1", resource_id=R).archived_at is None


def test_list_threads_narrows_by_archived_when_asked():
    memory = Memory()
    for thread_id in ("a", "b", "c"):
        memory.create_thread(resource_id=R, thread_id=thread_id)
    memory.archive_thread("b", resource_id=R)
    assert sorted(t.public_id for t in memory.list_threads(resource_id=R)) == ["a", "b", "c"]
    assert [t.public_id for t in memory.list_threads(resource_id=R, archived=True)] == ["b"]
    assert sorted(t.public_id for t in memory.list_threads(resource_id=R, archived=False)) == ["a", "c"]
    page = memory.list_threads(resource_id=R, archived=False, limit=1)
    rest = memory.list_threads(resource_id=R, archived=False, limit=1, cursor=page.next_cursor)
    assert sorted(t.public_id for t in [*page, *rest]) == ["a", "c"] and rest.next_cursor is None


def test_the_processor_leaves_archived_threads_out_on_any_store():
    """No database: the in-memory store names its archived threads as the Django one does."""
    from memproc.messages import Message
    from memproc.processors.base import ProcessorContext
    from memproc.processors.store import InMemoryStore
    from memproc.testing import HashEmbedder

    embedder = HashEmbedder(dimensions=32)
    store = InMemoryStore()
    store.add("old", [Message.create("user", TOPICS[0]).replace(resource_id=R)], embedder=embedder)
    store.add("here", [Message.create("user", TOPICS[1]).replace(resource_id=R)], embedder=embedder)

    def recalled(recall: SemanticRecall, thread_id: str) -> list[str]:
        ctx = ProcessorContext(
            processor_id=recall.id,
            messages=(Message.create("user", QUESTION),),
            thread_id=thread_id,
            resource_id=R,
            store=store,
        )
        same, other = recall.recall(ctx, QUESTION) or ([], [])
        return [m.text for m in [*same, *other]]

    recall = SemanticRecall(embedder=embedder, top_k=1, message_range=0)
    assert recalled(recall, "new") == [TOPICS[0]]
    store.archived.add("old")
    assert recalled(recall, "new") == [TOPICS[1]]
    assert recalled(recall, "old") == [TOPICS[0]]  # its own thread
    assert recalled(
        SemanticRecall(embedder=embedder, top_k=1, message_range=0, include_archived=True), "new"
    ) == [TOPICS[0]]
