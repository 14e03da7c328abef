"""Every search counts its scope (capped) to choose between the exact branch and the index: a large
scope, a small one, a filtered one, and one that shrank between two searches."""

from __future__ import annotations

from datetime import date

import numpy as np
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from memproc.models import public_message_id
from memproc.vectors import PgvectorStore
from memproc.vectors.base import SearchFilter
from tests.vectors.helpers import clustered, rows_for

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

M = "m16"


@pytest.fixture
def loaded(make_messages) -> tuple[PgvectorStore, np.ndarray]:
    """300 rows in resource r1 (thread big), 5 in resource r2; the exact-search limit is 50."""
    vectors = clustered(305)
    store = PgvectorStore(exact_max_rows=50, merge_after=None)
    store.store(rows_for(make_messages("big", 300), vectors[:300], model=M))
    store.store(rows_for(make_messages("few", 5, resource_id="r2"), vectors[300:], model=M))
    return store, vectors


def search_sql_of(call) -> str:
    with CaptureQueriesContext(connection) as queries:
        hits = call()
    (sql,) = [q["sql"] for q in queries.captured_queries if "hnsw.ef_search" in q["sql"]]
    return sql, hits


def test_a_large_scope_is_counted_on_every_search_and_answered_alike(loaded) -> None:
    store, vectors = loaded

    def search():
        return store.search(embedder_id=M, vector=vectors[7], top_k=5, resource_id="r1")

    first_sql, first = search_sql_of(search)
    second_sql, second = search_sql_of(search)
    assert "scope_rows" in first_sql and "scope_rows" in second_sql
    assert [h.message_id for h in second] == [h.message_id for h in first]
    assert second[0].score == pytest.approx(1.0, abs=1e-5)


def test_a_small_scope_is_counted_on_every_search(loaded) -> None:
    store, vectors = loaded
    for _ in range(2):
        sql, hits = search_sql_of(
            lambda: store.search(embedder_id=M, vector=vectors[301], top_k=3, resource_id="r2")
        )
        assert "scope_rows" in sql
        assert public_message_id(hits[0].message_id).startswith("few-")


def test_a_filtered_search_is_always_counted(loaded) -> None:
    store, vectors = loaded
    only_recent = SearchFilter.of(date_range={"start": date(2000, 1, 1)})
    for _ in range(2):
        sql, hits = search_sql_of(
            lambda: store.search(
                embedder_id=M, vector=vectors[7], top_k=5, resource_id="r1", filter=only_recent
            )
        )
        assert "scope_rows" in sql and hits


def test_a_scope_that_shrank_is_answered_from_what_is_left(loaded) -> None:
    store, vectors = loaded
    store.search(embedder_id=M, vector=vectors[7], top_k=5, thread_id="big")
    from memproc.models import MessageEmbedding

    MessageEmbedding.objects.filter(thread_id__endswith="big").exclude(
        message__public_id="big-m00007"
    ).delete()
    sql, hits = search_sql_of(
        lambda: store.search(embedder_id=M, vector=vectors[7], top_k=5, thread_id="big")
    )
    assert "scope_rows" in sql  # counted again: now small, so answered exactly
    assert [public_message_id(h.message_id) for h in hits] == ["big-m00007"]
