"""What only PostgreSQL shows: the per-embedder HNSW index, its use, and filtered HNSW scans."""

from __future__ import annotations

import numpy as np
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from memproc.models import public_message_id
from memproc.vectors import NumpyVectorStore, PgvectorStore
from memproc.vectors.pgvector_index import index_name
from memproc.vectors.pgvector_search import last_result
from tests.vectors.helpers import MODEL, clustered, explain, hnsw_indexes, random_vectors, rows_for

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]


@pytest.mark.django_db(transaction=True)
def test_ensure_index_creates_one_index_per_embedder_and_size(make_messages) -> None:
    """The explicit build (commands, migrations, tests): stores and searches never create one."""
    store = PgvectorStore()
    messages = make_messages("t1", 4)
    store.store(rows_for(messages[:2], random_vectors(2), model="first-embedder"))
    store.search(embedder_id="first-embedder", vector=random_vectors(1)[0], top_k=3)
    assert hnsw_indexes() == {}
    store.ensure_index("first-embedder", 8)
    store.ensure_index("first-embedder", 8)  # IF NOT EXISTS
    name = index_name("first-embedder", 8)
    definition = hnsw_indexes()[name]
    assert "USING hnsw (((vector)::halfvec(8)) halfvec_cosine_ops)" in definition  # HNSW_INDEX_TYPE
    assert "(model)::text = 'first-embedder'::text" in definition and "dimensions = 8" in definition
    store.ensure_index("second-embedder", 8)
    store.ensure_index("second-embedder", 4, concurrently=True)
    assert set(hnsw_indexes()) == {name, index_name("second-embedder", 8), index_name("second-embedder", 4)}
    with connection.cursor() as cursor:
        for index in hnsw_indexes():
            cursor.execute(f"DROP INDEX {index}")


def test_an_unscoped_search_on_a_large_embedder_walks_the_hnsw_index(make_messages) -> None:
    messages = make_messages("t1", 3000)
    vectors = clustered(3000)
    PgvectorStore().ensure_index("m16", 16)
    NumpyVectorStore().store(rows_for(messages, vectors, model="m16"))  # marked: in the graph
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE memproc_messageembedding")
    store = PgvectorStore(exact_max_rows=100)  # 3000 rows: past the exact-search limit
    query = vectors[3] / np.linalg.norm(vectors[3])
    plan = explain(store.search_sql(connection, embedder_id="m16", query=query, top_k=10))
    assert index_name("m16", 16) in plan
    hits = store.search(embedder_id="m16", vector=vectors[3], top_k=10)
    exact = NumpyVectorStore().search(embedder_id="m16", vector=vectors[3], top_k=10)
    assert hits[0].message_id == messages[3].id
    assert len({h.message_id for h in hits} & {h.message_id for h in exact}) >= 9


def test_a_filtered_hnsw_scan_still_returns_top_k_for_a_small_resource(make_messages) -> None:
    """One resource holds 2% of the embedder's rows: a plain HNSW scan (ef_search 10) would find
    about one of its rows; the iterative scan keeps walking the graph until top_k match."""
    messages = make_messages("big", 3000, resource_id="big") + make_messages("small", 60, resource_id="small")
    vectors = clustered(len(messages), seed=1)
    store = PgvectorStore(exact_max_rows=0, ef_search=10)
    store.ensure_index("m16", 16)
    NumpyVectorStore().store(rows_for(messages, vectors, model="m16"))  # the same INSERT, no index check
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE memproc_messageembedding")
    query = vectors[10] / np.linalg.norm(vectors[10])
    sql = store.search_sql(connection, embedder_id="m16", query=query, top_k=10, resource_id="small")
    # Small scopes are cheaper by the btree and a sort, and the planner knows it; make it take HNSW.
    forced = "SET LOCAL enable_sort = off; " + sql
    assert index_name("m16", 16) in explain(forced)
    with connection.cursor() as cursor:
        cursor.execute(forced)
        found = last_result(cursor, connection)
        cursor.execute(forced.replace("relaxed_order", "off"))
        without_iterative_scan = last_result(cursor, connection)
    assert len(found) == 10
    assert len(without_iterative_scan) < 10
    exact = NumpyVectorStore().search(embedder_id="m16", vector=query, top_k=10, resource_id="small")
    assert len({row[0] for row in found} & {h.message_id for h in exact}) >= 8
    assert all(public_message_id(row[0]).startswith("small-") for row in found)
    # Through the public API the planner's own choice gives the exact answer.
    hits = store.search(embedder_id="m16", vector=query, top_k=10, resource_id="small")
    assert [h.message_id for h in hits] == [h.message_id for h in exact]


def test_search_settings_apply_to_the_search_statement_only(make_messages) -> None:
    store = PgvectorStore(ef_search=123)
    store.store(rows_for(make_messages("t1", 3), random_vectors(3)))
    sql = store.search_sql(connection, embedder_id=MODEL, query=random_vectors(1)[0], top_k=3)
    assert sql.startswith(
        "SET LOCAL max_parallel_workers_per_gather = 0; SET LOCAL hnsw.ef_search = 123; SET LOCAL hnsw.iterative_scan = relaxed_order; "
    )
    with CaptureQueriesContext(connection) as queries:
        store.search(embedder_id=MODEL, vector=random_vectors(1)[0], top_k=3)
    assert len(queries) == 1


@pytest.mark.django_db(transaction=True)
def test_set_local_does_not_leak_into_the_session(make_messages) -> None:
    store = PgvectorStore(ef_search=321)
    store.store(rows_for(make_messages("t1", 3), random_vectors(3)))
    store.search(embedder_id=MODEL, vector=random_vectors(1)[0], top_k=3)
    with connection.cursor() as cursor:
        cursor.execute("SHOW hnsw.ef_search")
        assert cursor.fetchone()[0] != "321"
