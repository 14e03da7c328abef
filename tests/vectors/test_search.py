"""Store and search, with the store memproc picks for the database; the same tests on both."""

from __future__ import annotations

import numpy as np
import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from memproc.exceptions import ConfigurationError
from memproc.models import Message, MessageEmbedding
from memproc.vectors import NumpyVectorStore, PgvectorStore, get_vector_store
from tests.vectors.helpers import DIMS, MODEL, exact_ranking, random_vectors, rows_for, unit

pytestmark = pytest.mark.django_db


def assert_hits(hits, expected) -> None:
    assert [hit.message_id for hit in hits] == [message_id for message_id, _ in expected]
    np.testing.assert_allclose([hit.score for hit in hits], [score for _, score in expected], atol=1e-5)


@pytest.fixture
def corpus(make_messages):
    """Two resources, three threads, 40 messages with one 8-d vector each."""
    messages = make_messages("t1", 15) + make_messages("t2", 10) + make_messages("t3", 15, resource_id="r2")
    return rows_for(messages, random_vectors(len(messages), seed=1))


def test_auto_store_follows_the_database(store, on_postgres) -> None:
    assert isinstance(store, PgvectorStore if on_postgres else NumpyVectorStore)


def test_store_is_idempotent(store, make_messages) -> None:
    messages = make_messages("t1", 3)
    rows = rows_for(messages, random_vectors(3))
    store.store(rows)
    store.store(rows)
    store.store(rows_for(messages, random_vectors(3, seed=9)))  # same keys, new vectors: ignored
    assert MessageEmbedding.objects.count() == 3
    kept = {e.message_id: e.vector for e in MessageEmbedding.objects.all()}
    for row in rows:
        np.testing.assert_allclose(kept[row.message_id], row.vector)
    store.store(rows_for(messages[:1], random_vectors(1), chunk=1))  # another chunk is another row
    assert MessageEmbedding.objects.count() == 4


def test_store_is_one_query_per_call(store, make_messages) -> None:
    rows = rows_for(make_messages("t1", 50), random_vectors(50))
    store.store(rows[:1])  # a pgvector store creates the embedder's index on its first store
    with CaptureQueriesContext(connection) as queries:
        store.store(rows[1:])
    assert len(queries) == 1
    with CaptureQueriesContext(connection) as queries:
        store.store([])
    assert len(queries) == 0


def test_store_refuses_a_vector_of_the_wrong_size(store, make_messages) -> None:
    [row] = rows_for(make_messages("t1", 1), random_vectors(1))
    with pytest.raises(ValueError):
        store.store([row.__class__(**{**_asdict(row), "dimensions": DIMS + 1})])


def _asdict(row):
    return {name: getattr(row, name) for name in row.__slots__}


def _messages(rows):
    return Message.objects.filter(pk__in=[r.message_id for r in rows]).order_by("pk")


@pytest.mark.parametrize(
    ("scope", "keep"),
    [
        ({}, lambda row: True),
        ({"resource_id": "r1"}, lambda row: row.resource_id == "r1"),
        ({"resource_id": "r2"}, lambda row: row.resource_id == "r2"),
        ({"thread_id": "t2"}, lambda row: row.thread_id == "t2"),
        ({"thread_id": "t2", "resource_id": "r1"}, lambda row: row.thread_id == "t2"),
        ({"thread_id": "t2", "resource_id": "r2"}, lambda row: False),
    ],
)
def test_search_finds_the_closest_messages_of_the_scope(store, corpus, scope, keep) -> None:
    store.store(corpus)
    query = random_vectors(1, seed=2)[0]
    hits = store.search(embedder_id=MODEL, vector=query, top_k=5, **scope)
    assert_hits(hits, exact_ranking([r for r in corpus if keep(r)], query, top_k=5))
    assert all(
        hit.thread_id == row.thread_id for hit in hits for row in corpus if row.message_id == hit.message_id
    )


def test_a_thread_id_names_a_thread_within_its_resource(store, make_messages) -> None:
    """Two resources may each have a thread "shared": a thread scope with a resource is that one only."""
    mine, theirs = make_messages("shared", 6), make_messages("shared", 6, resource_id="r2")
    rows = rows_for(mine + theirs, random_vectors(12, seed=12))
    assert {row.thread_id for row in rows} == {"shared"}  # embeddings hold the public thread id
    store.store(rows)
    query = random_vectors(1, seed=13)[0]
    for resource_id, own in (("r1", mine), ("r2", theirs)):
        hits = store.search(
            embedder_id=MODEL, vector=query, top_k=12, thread_id="shared", resource_id=resource_id
        )
        assert_hits(hits, exact_ranking([r for r in rows if r.resource_id == resource_id], query, top_k=12))
        assert {hit.message_id for hit in hits} == {m.id for m in own}
        assert {hit.thread_id for hit in hits} == {"shared"}
    both = store.search(embedder_id=MODEL, vector=query, top_k=12, thread_id="shared")
    assert_hits(both, exact_ranking(rows, query, top_k=12))


def test_the_query_need_not_be_normalised(store, corpus) -> None:
    store.store(corpus)
    query = random_vectors(1, seed=3)[0]
    first = store.search(embedder_id=MODEL, vector=query, top_k=4)
    scaled = store.search(embedder_id=MODEL, vector=(query * 7.5).tolist(), top_k=4)
    assert [h.message_id for h in first] == [h.message_id for h in scaled]
    np.testing.assert_allclose([h.score for h in first], [h.score for h in scaled], atol=1e-5)


def test_a_message_vector_finds_itself_first(store, corpus) -> None:
    store.store(corpus)
    hits = store.search(embedder_id=MODEL, vector=corpus[7].vector, top_k=3)
    assert hits[0].message_id == corpus[7].message_id
    assert hits[0].score == pytest.approx(1.0, abs=1e-5)


def test_threshold_is_a_minimum_similarity(store, corpus) -> None:
    store.store(corpus)
    query = random_vectors(1, seed=4)[0]
    hits = store.search(embedder_id=MODEL, vector=query, top_k=40, threshold=0.3)
    expected = exact_ranking(corpus, query, top_k=40, threshold=0.3)
    assert 0 < len(expected) < 40
    assert_hits(hits, expected)
    assert store.search(embedder_id=MODEL, vector=query, top_k=5, threshold=0.999) == []


def test_a_score_equal_to_the_threshold_is_kept(store, make_messages) -> None:
    """The threshold is inclusive on both stores (cosine 0.5 is exact in float32 and in SQL here)."""
    messages = make_messages("t1", 2)
    store.store(rows_for(messages, [[1, 1, 1, 1, 0, 0, 0, 0], [0, 0, 0, 0, 1, 0, 0, 0]]))
    query = [1, 0, 0, 0, 0, 0, 0, 0]
    for _ in range(2):  # a cold search, then one over what the store already read
        hits = store.search(embedder_id=MODEL, vector=query, top_k=5, threshold=0.5)
        assert [(h.message_id, h.score) for h in hits] == [(messages[0].id, 0.5)]
    assert store.search(embedder_id=MODEL, vector=query, top_k=5, threshold=0.5000001) == []


def test_a_filter_picks_the_admitted_messages_before_top_k(store, corpus) -> None:
    """A filter narrows the scope, then the top_k are the best admitted messages: not the scope's best
    few with the unadmitted ones dropped (which could leave fewer than top_k)."""
    from memproc.models import Thread
    from memproc.vectors.base import SearchFilter, search_filtered

    store.store(corpus)
    Thread.objects.filter(public_id="t2").update(metadata={"topic": "garden"})
    garden = SearchFilter.of(thread_metadata={"topic": "garden"})
    admitted = [row for row in corpus if row.thread_id == "t2"]
    for query in random_vectors(3, seed=11):
        best_overall = exact_ranking(corpus, query, top_k=5)
        assert any(message_id not in {r.message_id for r in admitted} for message_id, _ in best_overall)
        for _ in range(2):  # the second search answers from what the store already read
            hits = search_filtered(
                store, filter=garden, embedder_id=MODEL, vector=query, top_k=5, resource_id="r1"
            )
            assert_hits(hits, exact_ranking(admitted, query, top_k=5))
    nowhere = SearchFilter.of(thread_metadata={"topic": "nowhere"})
    assert search_filtered(store, filter=nowhere, embedder_id=MODEL, vector=query, top_k=5) == []
    # A filter within a thread scope keeps the scope: t1's messages are not t2's.
    assert (
        search_filtered(store, filter=garden, embedder_id=MODEL, vector=query, top_k=5, thread_id="t1") == []
    )


def test_several_chunks_of_a_message_count_once_with_the_best_score(store, make_messages) -> None:
    messages = make_messages("t1", 4)
    query = unit([1, 0, 0, 0, 0, 0, 0, 0])
    near = [unit([1, 0.1 * i, 0, 0, 0, 0, 0, 0]) for i in range(1, 5)]
    rows = rows_for(messages[:1] * 4, near[:1] * 4)  # four chunks of message 0, close to the query
    rows = [row.__class__(**{**_asdict(row), "chunk": i, "vector": near[i]}) for i, row in enumerate(rows)]
    rows += rows_for(
        messages[1:],
        [unit([0.5, 1, 0, 0, 0, 0, 0, 0]), unit([0, 1, 0, 0, 0, 0, 0, 0]), unit([0.2, 0, 1, 0, 0, 0, 0, 0])],
    )
    store.store(rows)
    hits = store.search(embedder_id=MODEL, vector=query, top_k=3)
    assert [h.message_id for h in hits] == [messages[0].id, messages[1].id, messages[3].id]
    assert hits[0].score == pytest.approx(float(near[0] @ query), abs=1e-5)
    assert_hits(hits, exact_ranking(rows, query, top_k=3))


def test_rows_of_other_embedders_and_sizes_are_ignored(store, corpus, make_messages) -> None:
    store.store(corpus)
    query = random_vectors(1, seed=5)[0]
    others = make_messages("t9", 20)
    close = np.tile(query, (20, 1))  # identical to the query: would win if counted
    store.store(rows_for(others, close, model="another-embedder"))
    store.store(rows_for(others, np.hstack([close, close]), model=MODEL))  # same id, 16-d
    hits = store.search(embedder_id=MODEL, vector=query, top_k=5)
    assert_hits(hits, exact_ranking(corpus, query, top_k=5))
    wide = store.search(embedder_id=MODEL, vector=np.hstack([query, query]), top_k=3)
    assert {h.message_id for h in wide} <= {m.id for m in others} and len(wide) == 3
    assert store.search(embedder_id="nobody", vector=query, top_k=5) == []


def test_top_k_larger_than_the_scope_returns_the_whole_scope(store, corpus) -> None:
    store.store(corpus)
    query = random_vectors(1, seed=6)[0]
    hits = store.search(embedder_id=MODEL, vector=query, top_k=100, thread_id="t2")
    assert_hits(hits, exact_ranking([r for r in corpus if r.thread_id == "t2"], query, top_k=100))
    assert len(hits) == 10


def test_ids_with_quotes_and_percent_signs_are_safe(store, make_messages) -> None:
    resource = 'o\'brien %s %% \\ "x"'
    rows = rows_for(make_messages("t'1 %s", 3, resource_id=resource), random_vectors(3))
    store.store(rows)
    query = random_vectors(1, seed=7)[0]
    for scope in ({"resource_id": resource}, {"thread_id": "t'1 %s"}):
        assert_hits(
            store.search(embedder_id=MODEL, vector=query, top_k=3, **scope),
            exact_ranking(rows, query, top_k=3),
        )
    weird_model = "it's 50%"
    store.store(rows_for(list(_messages(rows)), random_vectors(3), model=weird_model))
    assert len(store.search(embedder_id=weird_model, vector=query, top_k=3)) == 3


def test_nothing_is_similar_to_the_zero_vector(store, corpus) -> None:
    store.store(corpus)
    assert store.search(embedder_id=MODEL, vector=[0.0] * DIMS, top_k=3) == []


def test_bad_arguments_are_refused(store) -> None:
    with pytest.raises(ValueError):
        store.search(embedder_id=MODEL, vector=[1.0] * DIMS, top_k=0)
    with pytest.raises(ValueError):
        store.search(embedder_id=MODEL, vector=[], top_k=3)
    with pytest.raises(ValueError):
        store.search(embedder_id=MODEL, vector=[1.0] * DIMS, top_k=3, threshold=2)


def test_queries_per_search_do_not_grow_with_the_data(store, make_messages) -> None:
    query = random_vectors(1, seed=8)[0]
    counts = []
    for batch in range(3):
        messages = make_messages("t1", 10 * 10**batch)
        store.store(rows_for(messages, random_vectors(len(messages), seed=batch)))
        store.search(embedder_id=MODEL, vector=query, top_k=5, resource_id="r1")  # warm caches
        for scope in ({}, {"resource_id": "r1"}, {"thread_id": "t1"}):
            with CaptureQueriesContext(connection) as queries:
                store.search(embedder_id=MODEL, vector=query, top_k=5, **scope)
            counts.append(len(queries))
    assert counts == [1] * len(counts)


@pytest.mark.postgres
def test_numpy_and_pgvector_agree_on_the_same_data(corpus) -> None:
    PgvectorStore().store(corpus)
    for seed in range(5):
        query = random_vectors(1, seed=100 + seed)[0]
        for scope in ({}, {"resource_id": "r1"}, {"thread_id": "t3"}):
            for threshold in (None, 0.1):
                args = {"embedder_id": MODEL, "vector": query, "top_k": 6, "threshold": threshold, **scope}
                by_numpy, by_pgvector = NumpyVectorStore().search(**args), PgvectorStore().search(**args)
                assert [h.message_id for h in by_numpy] == [h.message_id for h in by_pgvector]
                np.testing.assert_allclose(
                    [h.score for h in by_numpy], [h.score for h in by_pgvector], atol=1e-5
                )


def test_get_vector_store_understands_names_paths_and_options(on_postgres) -> None:
    assert isinstance(get_vector_store("numpy"), NumpyVectorStore)
    assert isinstance(get_vector_store("pgvector"), PgvectorStore)
    assert isinstance(get_vector_store("memproc.vectors.NumpyVectorStore"), NumpyVectorStore)
    built = get_vector_store({"CLASS": "memproc.vectors.NumpyVectorStore", "OPTIONS": {"cache_bytes": 1024}})
    assert built.cache_bytes == 1024
    instance = NumpyVectorStore()
    assert get_vector_store(instance) is instance
    with override_settings(MEMPROC={"VECTOR_STORE": "numpy"}):
        assert isinstance(get_vector_store(), NumpyVectorStore)
    with override_settings(MEMPROC={}):
        assert isinstance(get_vector_store(), PgvectorStore if on_postgres else NumpyVectorStore)
    with pytest.raises(ConfigurationError):
        get_vector_store("memproc.vectors.NoSuchStore")
