"""InMemoryStore as a processor (or a user's test) sees it through the store protocol: how messages
are numbered and embedded, which ones each read returns (window, existing ids, neighbours, vector
hits), and the working memory, metadata, summaries and attachment store it hands back. No database."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from memproc.messages import Message
from memproc.processors.store import InMemoryStore, ThreadSummaryValue, VectorHit, WorkingMemoryValue

R = "r-store"


class TableEmbedder:
    """Embeds each text as the table's vector (unknown text: [1, 0]); records the batches."""

    def __init__(self, table: dict[str, list[float]], id: str = "table") -> None:
        self.table, self.id = table, id
        self.batches: list[list[str]] = []

    def embed(self, texts: list[str]) -> list[list[float]]:
        self.batches.append(list(texts))
        return [self.table.get(text, [1.0, 0.0]) for text in texts]


def m(id: str, text: str = "", role: str = "user", resource_id: str | None = R) -> Message:
    return Message.create(role, text or id, id=id).replace(resource_id=resource_id)


def test_added_messages_are_numbered_on_from_the_last_stored_sequence():
    store = InMemoryStore()
    store.add("t", [m("a"), m("b")])
    assert [(x.id, x.thread_id, x.sequence) for x in store.threads["t"]] == [("a", "t", 1), ("b", "t", 2)]
    store.threads["t"][-1] = store.threads["t"][-1].replace(sequence=10)
    store.add("t", [m("c")])
    assert store.threads["t"][-1].sequence == 11
    store.add("u", [m("d")])
    assert store.threads["u"][0].sequence == 1


def test_a_thread_of_unnumbered_messages_counts_them():
    store = InMemoryStore(threads={"t": [m("a"), m("b")]})
    store.add("t", [m("c")])
    assert store.threads["t"][-1].sequence == 3


def test_only_user_and_assistant_messages_with_text_are_embedded_in_one_batch():
    embedder = TableEmbedder({"hello": [0.0, 2.0]}, id="e1")
    store = InMemoryStore()
    messages = [m("u", "hello"), m("s", "rule", "system"), m("b", "  ", "user"), m("a", "reply", "assistant")]
    store.add("t", [*messages, Message.create("tool", "out", id="x")], embedder=embedder)
    assert embedder.batches == [["hello", "reply"]]
    assert set(store.vectors) == {"u", "a"}
    model, thread, resource, vector = store.vectors["u"]
    assert (model, thread, resource) == ("e1", "t", R)
    assert vector.dtype == np.float32 and vector.tolist() == [0.0, 2.0]
    assert store.vectors["a"][2] == R
    store.add("t", [m("n", "no resource", resource_id=None)], embedder=embedder)
    assert store.vectors["n"][2] == ""


def test_without_an_embedder_nothing_is_embedded():
    store = InMemoryStore()
    store.add("t", [m("a")])
    assert store.vectors == {}


def test_the_recent_window_is_the_last_messages_oldest_first():
    store = InMemoryStore()
    store.add("t", [m("a"), m("b"), m("c")])
    got = store.messages_recent(thread_id="t", resource_id=R, limit=2)
    assert [x.id for x in got] == ["b", "c"]
    assert [x.id for x in store.messages_recent(thread_id="t", resource_id=R, limit=5)] == ["a", "b", "c"]
    assert store.messages_recent(thread_id="t", resource_id=R, limit=0) == []
    assert store.messages_recent(thread_id="nope", resource_id=R, limit=3) == []
    got.clear()
    assert len(store.threads["t"]) == 3


def test_existing_ids_are_those_of_the_asking_resource():
    store = InMemoryStore()
    store.add("t1", [m("a"), m("b", resource_id="r-other")])
    store.add("t2", [m("c", resource_id=None)])
    asked = ["a", "b", "c", "missing"]
    assert store.messages_existing(ids=iter(asked), resource_id=R) == {"a": (R, "t1"), "c": ("", "t2")}
    assert store.messages_existing(ids=asked, resource_id="r-other") == {
        "b": ("r-other", "t1"),
        "c": ("", "t2"),
    }
    assert store.messages_existing(ids=asked, resource_id=None) == {
        "a": (R, "t1"),
        "b": ("r-other", "t1"),
        "c": ("", "t2"),
    }


def around(store: InMemoryStore, ids: list[str], before: int, after: int) -> dict[str, list[str]]:
    got = store.messages_around(message_ids=ids, resource_id=R, before=before, after=after)
    return {tid: [x.id for x in messages] for tid, messages in got.items()}


@pytest.fixture
def five() -> InMemoryStore:
    store = InMemoryStore()
    store.add("t", [m(f"m{i}") for i in range(5)])
    store.add("u", [m("u0"), m("u1")])
    return store


def test_neighbours_before_and_after_each_hit_in_order(five):
    assert around(five, ["m2"], 1, 1) == {"t": ["m1", "m2", "m3"]}
    assert around(five, ["m2"], 0, 0) == {"t": ["m2"]}
    assert around(five, ["m2"], 2, 0) == {"t": ["m0", "m1", "m2"]}
    assert around(five, ["m2"], 0, 2) == {"t": ["m2", "m3", "m4"]}
    assert around(five, ["m3", "m0"], 0, 1) == {"t": ["m0", "m1", "m3", "m4"]}


def test_neighbours_stop_at_the_threads_edges_and_group_by_thread(five):
    assert around(five, ["m0", "u1"], 3, 3) == {"t": ["m0", "m1", "m2", "m3"], "u": ["u0", "u1"]}
    assert around(five, ["m4"], 1, 5) == {"t": ["m3", "m4"]}
    assert around(five, ["nope"], 1, 1) == {}


def test_recall_excluded_messages_are_neither_hits_nor_neighbours(five):
    five.recall_excluded = {"m1", "m4"}
    assert around(five, ["m2"], 1, 1) == {"t": ["m2", "m3"]}
    assert around(five, ["m4"], 1, 1) == {}


def test_the_query_vector_is_the_embedders_in_float32():
    vector = InMemoryStore().query_vector(text="q", embedder=TableEmbedder({"q": [3.0, 4.0]}))
    assert vector.dtype == np.float32 and vector.tolist() == [3.0, 4.0]


def search_store() -> InMemoryStore:
    store = InMemoryStore()
    table = {"same": [2.0, 0.0], "half": [1.0, 1.0], "ortho": [0.0, 5.0], "opposite": [-1.0, 0.0]}
    store.add("t1", [m("same"), m("half")], embedder=TableEmbedder(table))
    store.add("t2", [m("ortho"), m("opposite", resource_id="r-other")], embedder=TableEmbedder(table))
    store.add("t3", [m("other-model", "same")], embedder=TableEmbedder(table, id="other"))
    return store


def hits(
    store: InMemoryStore, vector: list[float] = (4.0, 0.0), **kwargs: Any
) -> list[tuple[str, str, float]]:
    found = store.vectors_search(
        embedder_id="table",
        vector=np.asarray(vector, dtype=np.float32),
        top_k=kwargs.pop("top_k", 10),
        **kwargs,
    )
    return [(h.message_id, h.thread_id, round(h.score, 4)) for h in found]


def test_vector_search_ranks_by_cosine_similarity_for_one_embedder():
    assert hits(search_store()) == [
        ("same", "t1", 1.0),
        ("half", "t1", 0.7071),
        ("ortho", "t2", 0.0),
        ("opposite", "t2", -1.0),
    ]


def test_vector_search_filters_top_k_threshold_thread_and_resource():
    store = search_store()
    assert hits(store, top_k=2) == [("same", "t1", 1.0), ("half", "t1", 0.7071)]
    assert hits(store, threshold=0.0) == [("same", "t1", 1.0), ("half", "t1", 0.7071), ("ortho", "t2", 0.0)]
    assert hits(store, thread_id="t2") == [("ortho", "t2", 0.0), ("opposite", "t2", -1.0)]
    assert hits(store, resource_id="r-other") == [("opposite", "t2", -1.0)]
    assert hits(store, resource_id=R, threshold=0.5, thread_id="t1") == [
        ("same", "t1", 1.0),
        ("half", "t1", 0.7071),
    ]
    store.recall_excluded = {"same"}
    assert [h[0] for h in hits(store)] == ["half", "ortho", "opposite"]


def test_a_zero_vector_scores_zero_instead_of_failing():
    store = InMemoryStore()
    store.add("t", [m("z", "zero")], embedder=TableEmbedder({"zero": [0.0, 0.0]}))
    assert hits(store) == [("z", "t", 0.0)]
    assert hits(search_store(), vector=[0.0, 0.0])[0][2] == 0.0


def test_vector_hits_are_value_objects():
    assert VectorHit("a", "t", 0.5) == VectorHit(message_id="a", thread_id="t", score=0.5)


def test_archived_threads_are_a_copy():
    store = InMemoryStore(archived={"a"})
    got = store.threads_archived(resource_id=R)
    assert got == {"a"}
    got.add("b")
    assert store.archived == {"a"}


def test_working_memory_has_version_one_once_written_and_zero_before():
    store = InMemoryStore(working_memory={("resource", R): "text", ("thread", "t"): "notes"})
    assert store.working_memory_get(scope="resource", key=R) == WorkingMemoryValue("text", 1, ())
    assert store.working_memory_get(scope="thread", key="t", resource_id=R) == WorkingMemoryValue(
        "notes", 1, ()
    )
    assert store.working_memory_get(scope="resource", key="r-new") == WorkingMemoryValue("", 0, ())
    assert store.working_memory_get(scope="thread", key=R) == WorkingMemoryValue("", 0, ())


def test_pins_belong_to_a_resources_working_memory_only():
    store = InMemoryStore(working_memory={("resource", R): "x"}, pinned={R: ["Name", "City"], "t": ("Name",)})
    assert store.working_memory_get(scope="resource", key=R).pinned == ("Name", "City")
    assert store.working_memory_get(scope="thread", key="t").pinned == ()
    assert store.working_memory_get(scope="resource", key="r-none").pinned == ()


def test_thread_metadata_is_empty_for_a_known_thread_and_none_for_an_unknown_one():
    store = InMemoryStore(metadata={"meta-only": {"k": "v"}})
    store.add("t", [m("a")])
    assert store.thread_metadata(thread_id="t", resource_id=R) == {}
    assert store.thread_metadata(thread_id="meta-only", resource_id=R) == {"k": "v"}
    assert store.thread_metadata(thread_id="nope", resource_id=R) is None


def test_thread_summaries():
    summary = ThreadSummaryValue(text="so far", covered_sequence=4, version=2)
    store = InMemoryStore(summaries={"t": summary})
    assert store.thread_summary(thread_id="t", resource_id=R) is summary
    assert store.thread_summary(thread_id="u", resource_id=R) is None
    assert (summary.counted_through, summary.counted_tokens) == (0, 0)


def test_the_attachment_store_is_the_one_given_or_a_lookup_error_that_says_how():
    given = object()
    assert InMemoryStore(attachments=given).attachment_store() is given
    with pytest.raises(LookupError) as raised:
        InMemoryStore().attachment_store()
    assert str(raised.value) == "This InMemoryStore has no attachment store; pass attachments=..."


class ShortEmbedder:
    """A broken embedder: one vector fewer than the texts it was given."""

    id = "short"

    def embed(self, texts: list[str]) -> list[list[float]]:
        return [[1.0, 0.0] for _ in texts[1:]]


def test_an_embedder_that_returns_too_few_vectors_is_an_error():
    with pytest.raises(ValueError):
        InMemoryStore().add("t", [m("a"), m("b")], embedder=ShortEmbedder())
