"""The NumPy store's per-process cache stays exact through inserts, deletes and rollbacks."""

from __future__ import annotations

import gc
import tracemalloc

import numpy as np
import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from memproc.models import Message, MessageEmbedding, Thread, message_key, thread_key
from memproc.vectors import NumpyVectorStore, get_vector_store
from tests.vectors.helpers import MODEL, exact_ranking, random_vectors, rows_for, unit

pytestmark = pytest.mark.django_db

QUERY = unit([1, 0, 0, 0, 0, 0, 0, 0])
NEAR = unit([1, 0.05, 0, 0, 0, 0, 0, 0])


def search(store: NumpyVectorStore, **scope):
    return store.search(embedder_id=MODEL, vector=QUERY, top_k=5, **scope)


def ids(hits) -> list[str]:
    return [hit.message_id for hit in hits]


@pytest.fixture
def numpy_store() -> NumpyVectorStore:
    return NumpyVectorStore()


@pytest.fixture
def base(numpy_store, make_messages):
    """20 stored messages far from QUERY, searched once so the cache is warm."""
    messages = make_messages("t1", 20)
    vectors = random_vectors(20, seed=3)
    vectors[:, 0] = -abs(vectors[:, 0])  # all on the far side of QUERY
    rows = rows_for(messages, vectors)
    numpy_store.store(rows)
    assert ids(search(numpy_store)) == ids(exact_ranking_hits(rows))
    return rows


def exact_ranking_hits(rows, top_k: int = 5):
    return [type("Hit", (), {"message_id": m})() for m, _ in exact_ranking(rows, QUERY, top_k=top_k)]


def test_new_rows_reach_the_next_search_in_one_query(
    numpy_store, base, make_messages, django_assert_max_num_queries
) -> None:
    [message] = make_messages("t1", 1)
    numpy_store.store(rows_for([message], [NEAR]))
    with django_assert_max_num_queries(1):
        hits = search(numpy_store)
    assert hits[0].message_id == message.id
    with django_assert_max_num_queries(1):
        assert search(numpy_store)[0].message_id == message.id


def test_deleted_rows_disappear_in_at_most_two_queries(
    numpy_store, base, make_messages, django_assert_max_num_queries
) -> None:
    [message] = make_messages("t1", 1)
    numpy_store.store(rows_for([message], [NEAR]))
    assert search(numpy_store)[0].message_id == message.id
    MessageEmbedding.objects.filter(message=message).delete()
    with django_assert_max_num_queries(2):
        hits = search(numpy_store)
    assert message.id not in ids(hits)
    assert ids(hits) == ids(exact_ranking_hits(base))


def test_a_rolled_back_delete_brings_the_rows_back(numpy_store, base, make_messages) -> None:
    [message] = make_messages("t1", 1)
    numpy_store.store(rows_for([message], [NEAR]))
    with pytest.raises(RuntimeError), transaction.atomic():
        MessageEmbedding.objects.filter(message=message).delete()
        assert message.id not in ids(search(numpy_store))
        raise RuntimeError("roll back")
    assert search(numpy_store)[0].message_id == message.id


def test_a_row_arriving_below_the_cached_max_pk_is_found(numpy_store, base, make_messages) -> None:
    [message] = make_messages("t1", 1)
    freed_pk = MessageEmbedding.objects.get(message_id=base[3].message_id).pk
    MessageEmbedding.objects.filter(pk=freed_pk).delete()
    search(numpy_store)  # the cache forgets that pk
    # As when another process commits a row whose pk it drew before ours (PostgreSQL sequences).
    [row] = rows_for([message], [NEAR])
    MessageEmbedding.objects.create(
        id=freed_pk,
        message=message,
        thread_id="t1",
        resource_id="r1",
        chunk=0,
        model=MODEL,
        dimensions=8,
        content_hash="x",
        vector=row.vector,
    )
    assert (
        MessageEmbedding.objects.get(message=message).pk < MessageEmbedding.objects.order_by("pk").last().pk
    )
    assert search(numpy_store)[0].message_id == message.id


def test_rows_of_another_size_in_the_scope_are_counted_not_searched(
    numpy_store, base, make_messages, django_assert_max_num_queries
) -> None:
    wide = make_messages("t1", 3)
    numpy_store.store(rows_for(wide, [np.ones(16, dtype=np.float32)] * 3))
    assert ids(search(numpy_store)) == ids(exact_ranking_hits(base))
    MessageEmbedding.objects.filter(message=wide[0]).delete()
    MessageEmbedding.objects.filter(message_id=base[0].message_id).delete()
    assert ids(search(numpy_store)) == ids(exact_ranking_hits(base[1:]))
    with django_assert_max_num_queries(1):
        assert ids(search(numpy_store)) == ids(exact_ranking_hits(base[1:]))


def test_a_deleted_thread_takes_its_vectors_along(numpy_store, base, make_messages) -> None:
    messages = make_messages("t2", 3)
    numpy_store.store(rows_for(messages, [NEAR] * 3))
    assert set(ids(search(numpy_store, resource_id="r1"))[:3]) == {m.id for m in messages}
    # Deleting the thread cascades through its messages to their embeddings.
    Thread.objects.filter(public_id="t2", resource_id="r1").delete()
    assert ids(search(numpy_store, resource_id="r1")) == ids(exact_ranking_hits(base))


def test_a_delete_and_an_insert_between_searches_are_both_seen(numpy_store, base, make_messages) -> None:
    [message] = make_messages("t1", 1)
    MessageEmbedding.objects.filter(message_id=base[0].message_id).delete()
    numpy_store.store(rows_for([message], [NEAR]))
    hits = search(numpy_store)
    assert hits[0].message_id == message.id
    assert base[0].message_id not in ids(numpy_store.search(embedder_id=MODEL, vector=QUERY, top_k=50))


def test_a_rolled_back_savepoint_is_forgotten_even_when_pks_are_reused(
    numpy_store, base, make_messages
) -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        ghosts = make_messages("t9", 3)
        numpy_store.store(rows_for(ghosts, [NEAR] * 3))
        assert set(ids(search(numpy_store))[:3]) == {m.id for m in ghosts}
        ghost_pks = set(MessageEmbedding.objects.filter(message__in=ghosts).values_list("pk", flat=True))
        raise RuntimeError("roll back")
    # New rows, far from the query; on SQLite they get the rolled-back rows' pks.
    fresh = make_messages("t1", 3)
    far = [unit([-1, 0, 0, 0, 0, 0, 0, i]) for i in range(3)]
    numpy_store.store(rows_for(fresh, far))
    if connection.vendor == "sqlite":
        reused = set(MessageEmbedding.objects.filter(message__in=fresh).values_list("pk", flat=True))
        assert reused == ghost_pks
    everything = numpy_store.search(embedder_id=MODEL, vector=QUERY, top_k=50)
    assert not {m.id for m in ghosts} & set(ids(everything))
    expected = exact_ranking(base + rows_for(fresh, far), QUERY, top_k=50)
    assert ids(everything) == [m for m, _ in expected]
    np.testing.assert_allclose([h.score for h in everything], [s for _, s in expected], atol=1e-5)


def test_executed_on_commit_callbacks_in_a_test_are_not_a_commit(
    numpy_store, base, make_messages, django_capture_on_commit_callbacks
) -> None:
    """Tests that run on_commit work inline must not make the cache trust rows that roll back."""
    with pytest.raises(RuntimeError), transaction.atomic():
        ghosts = make_messages("t9", 2)
        numpy_store.store(rows_for(ghosts, [NEAR] * 2))
        with django_capture_on_commit_callbacks(execute=True):
            assert set(ids(search(numpy_store))[:2]) == {m.id for m in ghosts}
        raise RuntimeError("roll back")
    fresh = make_messages("t1", 2)
    numpy_store.store(rows_for(fresh, [unit([-1, 0, 0, 0, 0, 0, 0, 1])] * 2))
    assert ids(numpy_store.search(embedder_id=MODEL, vector=QUERY, top_k=50)) == [
        m
        for m, _ in exact_ranking(
            base + rows_for(fresh, [unit([-1, 0, 0, 0, 0, 0, 0, 1])] * 2), QUERY, top_k=50
        )
    ]


@pytest.mark.django_db(transaction=True)
def test_committed_rows_stay_cached_and_a_rolled_back_transaction_does_not(
    numpy_store, make_messages
) -> None:
    messages = make_messages("t1", 5)
    rows = rows_for(messages, random_vectors(5, seed=11))
    numpy_store.store(rows)
    assert ids(search(numpy_store)) == ids(exact_ranking_hits(rows))
    with pytest.raises(RuntimeError), transaction.atomic():
        ghost = Message.objects.create(
            public_id="ghost",
            thread_id=thread_key("r1", "t1"),
            resource_id="r1",
            role="user",
            content={},
            sequence=99,
        )
        numpy_store.store(rows_for([ghost], [NEAR]))
        assert search(numpy_store)[0].message_id == message_key("r1", "ghost")
        raise RuntimeError("roll back")
    [late] = make_messages("t1", 1)
    numpy_store.store(rows_for([late], [unit([0, 1, 0, 0, 0, 0, 0, 0])]))
    hits = search(numpy_store)
    assert "ghost" not in ids(hits)
    assert ids(hits) == ids(exact_ranking_hits(rows + rows_for([late], [unit([0, 1, 0, 0, 0, 0, 0, 0])])))
    with CaptureQueriesContext(connection) as queries:  # committed: plain incremental refresh
        search(numpy_store)
    assert len(queries) <= 1


def test_scopes_are_cached_separately_and_agree_with_brute_force(numpy_store, make_messages) -> None:
    messages = make_messages("a", 300) + make_messages("b", 200) + make_messages("c", 100, resource_id="r2")
    vectors = random_vectors(len(messages), seed=12)
    rows = rows_for(messages, vectors)
    rows += rows_for(messages[::7], random_vectors(len(messages[::7]), seed=13), chunk=1)  # second chunks
    numpy_store.store(rows)
    for seed in range(5):
        query = random_vectors(1, seed=200 + seed)[0]
        for scope, keep in (
            ({}, lambda r: True),
            ({"resource_id": "r1"}, lambda r: r.resource_id == "r1"),
            ({"thread_id": "b"}, lambda r: r.thread_id == "b"),
        ):
            hits = numpy_store.search(embedder_id=MODEL, vector=query, top_k=8, **scope)
            expected = exact_ranking([r for r in rows if keep(r)], query, top_k=8)
            assert ids(hits) == [m for m, _ in expected]
            np.testing.assert_allclose([h.score for h in hits], [s for _, s in expected], atol=1e-5)


def test_many_chunks_of_few_messages_still_give_top_k_messages(numpy_store, make_messages) -> None:
    messages = make_messages("t1", 12)
    rows = []
    for chunk in range(10):  # the 3 first messages have 10 chunks each, all very close to the query
        rows += rows_for(
            messages[:3], [unit([1, 0.01 * (chunk + i), 0, 0, 0, 0, 0, 0]) for i in range(3)], chunk=chunk
        )
    rows += rows_for(messages[3:], random_vectors(9, seed=14))
    numpy_store.store(rows)
    hits = numpy_store.search(embedder_id=MODEL, vector=QUERY, top_k=6)
    assert ids(hits) == [m for m, _ in exact_ranking(rows, QUERY, top_k=6)]
    assert len(set(ids(hits))) == 6


def test_a_small_cache_stays_correct(make_messages) -> None:
    small = NumpyVectorStore(cache_bytes=8 * 4 * 64)  # room for one scope of 64 rows of 8 floats
    rows = []
    for name in ("a", "b", "c"):
        rows += rows_for(make_messages(name, 30), random_vectors(30, seed=ord(name)))
    small.store(rows)
    for _ in range(2):
        for name in ("a", "b", "c"):
            hits = small.search(embedder_id=MODEL, vector=QUERY, top_k=3, thread_id=name)
            assert ids(hits) == [
                m for m, _ in exact_ranking([r for r in rows if r.thread_id == name], QUERY, top_k=3)
            ]


def test_a_cache_of_zero_bytes_is_allowed_and_a_negative_one_refused(make_messages) -> None:
    from memproc.exceptions import ConfigurationError

    with pytest.raises(ConfigurationError, match=r"cache_bytes=\.\.\.\) must not be negative"):
        NumpyVectorStore(cache_bytes=-1)
    with pytest.raises(ConfigurationError, match="must not be negative"):
        get_vector_store({"CLASS": "memproc.vectors.NumpyVectorStore", "OPTIONS": {"cache_bytes": -1}})
    none = NumpyVectorStore(cache_bytes=0)
    rows = rows_for(make_messages("z", 10), random_vectors(10, seed=7))
    none.store(rows)
    for _ in range(2):
        assert ids(none.search(embedder_id=MODEL, vector=QUERY, top_k=3)) == [
            m for m, _ in exact_ranking(rows, QUERY, top_k=3)
        ]


WIDE_MODEL, WIDE, SCOPE_ROWS = "test-embedder-256", 256, 300


def memory_kept(store: NumpyVectorStore, scopes: list[str], query: np.ndarray) -> int:
    """Bytes this process still holds after searching each scope once, from an empty cache."""
    NumpyVectorStore.invalidate()
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for name in scopes:
            store.search(embedder_id=WIDE_MODEL, vector=query, top_k=3, thread_id=name)
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
        NumpyVectorStore.invalidate()


def test_the_cache_keeps_no_more_memory_than_its_bound(make_messages) -> None:
    scopes = [f"s{i}" for i in range(6)]
    rows = []
    for i, name in enumerate(scopes):
        vectors = random_vectors(SCOPE_ROWS, dims=WIDE, seed=i)
        rows += rows_for(make_messages(name, SCOPE_ROWS), vectors, model=WIDE_MODEL)
    NumpyVectorStore().store(rows)
    query = random_vectors(1, dims=WIDE, seed=99)[0]
    one_scope = SCOPE_ROWS * WIDE * 4  # its float32 matrix
    memory_kept(NumpyVectorStore(), scopes, query)  # first searches warm Django's own caches
    unbounded = memory_kept(NumpyVectorStore(), scopes, query)
    bounded = memory_kept(NumpyVectorStore(cache_bytes=int(one_scope * 1.5)), scopes, query)
    assert unbounded > 5 * one_scope  # the measure sees the cached vectors
    assert bounded < 2 * one_scope, (bounded, unbounded)


def test_invalidate_makes_the_next_search_see_rows_rewritten_in_place(
    numpy_store, base, django_assert_max_num_queries
) -> None:
    """A rewrite in place (same pks, same count) is what only `invalidate` tells the cache about."""
    first, second = base[0].message_id, base[1].message_id
    MessageEmbedding.objects.filter(message_id=first).update(vector=NEAR)
    numpy_store.invalidate(embedder_id=MODEL)
    with django_assert_max_num_queries(1):
        assert search(numpy_store)[0].message_id == first
    MessageEmbedding.objects.filter(message_id=second).update(vector=QUERY)
    numpy_store.invalidate()
    assert ids(search(numpy_store))[:2] == [second, first]


def test_an_empty_scope_finds_nothing(numpy_store, base) -> None:
    assert search(numpy_store, resource_id="nobody") == []
    assert numpy_store.search(embedder_id="unknown", vector=QUERY, top_k=3) == []
