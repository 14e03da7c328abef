"""Issue 22: HNSW_INDEX_TYPE: halfvec indexes (the default), vector ones, and migration 0014 between them."""

from __future__ import annotations

import importlib
from io import StringIO
from types import SimpleNamespace

import numpy as np
import pytest
from django.core.management import CommandError, call_command
from django.db import DatabaseError, connection
from django.test.utils import CaptureQueriesContext

from memproc.vectors import NumpyVectorStore, PgvectorStore, pgvector_index
from memproc.vectors.pgvector_index import index_name
from memproc.vectors.pgvector_store import forget_indexes
from tests.vectors.helpers import clustered, explain, hnsw_indexes, rows_for

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

M = "m16"
migration = importlib.import_module("memproc.migrations.0014_hnsw_index_type")


@pytest.fixture(autouse=True)
def no_hnsw_indexes():
    """Indexes outlive a test's flushed rows: each test here starts and ends without any."""

    def drop() -> None:
        with connection.cursor() as cursor:
            for name in hnsw_indexes():
                cursor.execute(f"DROP INDEX IF EXISTS {name}")
        forget_indexes()

    drop()
    yield
    drop()


def use_type(settings, kind: str) -> None:
    settings.MEMPROC = {**getattr(settings, "MEMPROC", {}), "HNSW_INDEX_TYPE": kind}
    forget_indexes()


def test_each_type_has_its_own_index_and_the_search_orders_by_it(make_messages, settings) -> None:
    messages, vectors = make_messages("t1", 3000), clustered(3000)
    store = PgvectorStore(exact_max_rows=0, merge_after=None)  # always the HNSW branch
    NumpyVectorStore().store(rows_for(messages, vectors, model=M))  # marked: in the graph
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE memproc_messageembedding")  # else stale statistics may pick the btree
    for kind in ("halfvec", "vector"):
        use_type(settings, kind)
        store.ensure_index(M, 16)
        definition = hnsw_indexes()[index_name(M, 16, kind)]
        assert f"(((vector)::{kind}(16)) {kind}_cosine_ops)" in definition
        sql = store.search_sql(connection, embedder_id=M, query=vectors[5], top_k=3)
        assert f"::{kind}(16)) <=>" in sql
        assert index_name(M, 16, kind) in explain(sql)
    assert index_name(M, 16, "halfvec") != index_name(M, 16, "vector")


def test_a_halfvec_search_returns_full_precision_scores(make_messages) -> None:
    messages, vectors = make_messages("t1", 300), clustered(300, seed=3)
    store = PgvectorStore(exact_max_rows=0, merge_after=None)
    store.ensure_index(M, 16)
    NumpyVectorStore().store(rows_for(messages, vectors, model=M))
    for i in (0, 17, 123):
        hits = store.search(embedder_id=M, vector=vectors[i], top_k=3)
        assert hits[0].message_id == messages[i].id
        # float32 arithmetic: ~1e-7. A distance computed in half precision is off by ~1e-4.
        assert hits[0].score == pytest.approx(1.0, abs=1e-6)
        unit = vectors[i] / np.linalg.norm(vectors[i])
        other = vectors[int(hits[1].message_id.rsplit("m", 1)[1])]
        expected = float(unit @ (other / np.linalg.norm(other)))
        assert hits[1].score == pytest.approx(expected, abs=1e-6)


def test_halfvec_indexes_embedders_of_more_than_2000_dimensions(make_messages, settings) -> None:
    messages, vectors = make_messages("t1", 4), clustered(4, dims=2500)
    PgvectorStore().ensure_index("wide", 2500)
    NumpyVectorStore().store(rows_for(messages, vectors, model="wide"))  # marked: in the index
    assert index_name("wide", 2500, "halfvec") in hnsw_indexes()
    hits = PgvectorStore(exact_max_rows=0).search(embedder_id="wide", vector=vectors[2], top_k=1)
    assert hits[0].message_id == messages[2].id
    use_type(settings, "vector")  # pgvector's HNSW takes at most 2,000 dimensions of `vector`
    with pytest.raises(DatabaseError, match="2000 dimensions"):
        PgvectorStore().ensure_index("wide", 2500)
    assert index_name("wide", 2500, "vector") not in hnsw_indexes()


def test_migration_0014_converts_indexes_both_ways_concurrently(make_messages, settings) -> None:
    NumpyVectorStore().store(rows_for(make_messages("t1", 50), clustered(50), model=M))
    NumpyVectorStore().store(rows_for(make_messages("t2", 5), clustered(5, dims=8), model="m8"))
    use_type(settings, "vector")
    PgvectorStore().ensure_index(M, 16)  # m8 has rows but was never indexed
    before = hnsw_indexes()
    assert set(before) == {index_name(M, 16, "vector")}
    editor = SimpleNamespace(connection=connection)
    use_type(settings, "halfvec")
    migration.forwards(None, editor)
    after = hnsw_indexes()
    assert set(after) == {index_name(M, 16, "halfvec")}  # m8: left to the build job
    definition = after[index_name(M, 16, "halfvec")]
    assert "halfvec_cosine_ops" in definition and "ef_construction='128'" in definition
    assert definition.endswith("AND indexed)")
    migration.forwards(None, editor)  # again: nothing to do
    assert hnsw_indexes() == after
    migration.backwards(None, editor)
    assert set(hnsw_indexes()) == {index_name(M, 16, "vector")}
    assert "vector_cosine_ops" in hnsw_indexes()[index_name(M, 16, "vector")]


def test_migration_0014_keeps_vector_indexes_where_the_site_says_vector(make_messages, settings) -> None:
    NumpyVectorStore().store(rows_for(make_messages("t1", 20), clustered(20), model=M))
    use_type(settings, "vector")
    PgvectorStore().ensure_index(M, 16)
    migration.forwards(None, SimpleNamespace(connection=connection))
    assert set(hnsw_indexes()) == {index_name(M, 16, "vector")}


def run_build_index() -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("memproc_reindex", "--build-index", stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_build_index_builds_missing_indexes_and_drops_the_other_type(make_messages, settings) -> None:
    NumpyVectorStore().store(rows_for(make_messages("t1", 30), clustered(30), model=M))
    NumpyVectorStore().store(rows_for(make_messages("t2", 5), clustered(5, dims=8), model="m8"))
    use_type(settings, "vector")
    PgvectorStore().ensure_index(M, 16)
    use_type(settings, "halfvec")
    out, _ = run_build_index()
    assert set(hnsw_indexes()) == {index_name(M, 16, "halfvec"), index_name("m8", 8, "halfvec")}
    assert f"Dropped {index_name(M, 16, 'vector')}" in out and "2 index(es) built, 1 dropped." in out
    definition = hnsw_indexes()[index_name("m8", 8, "halfvec")]
    assert "halfvec_cosine_ops" in definition and definition.endswith("AND indexed)")
    out, _ = run_build_index()  # nothing left to do
    assert "0 index(es) built, 0 dropped." in out
    # Searches use the indexes built ahead: no CREATE INDEX on the request path.
    with CaptureQueriesContext(connection) as queries:
        PgvectorStore().search(embedder_id="m8", vector=clustered(1, dims=8)[0], top_k=2)
    assert not any("CREATE INDEX" in q["sql"] for q in queries.captured_queries)


def test_build_index_keeps_the_old_index_when_the_new_one_cannot_be_built(make_messages, settings) -> None:
    NumpyVectorStore().store(rows_for(make_messages("t1", 3), clustered(3, dims=2500), model="wide"))
    PgvectorStore().ensure_index("wide", 2500)  # halfvec: up to 4,000 dimensions
    use_type(settings, "vector")  # at most 2,000
    with pytest.raises(CommandError, match="0 index\\(es\\) built, 0 dropped. 1 failed."):
        run_build_index()
    assert set(hnsw_indexes()) == {index_name("wide", 2500, "halfvec")}  # no invalid leftover either


def test_pgvector_before_0_7_keeps_vector_indexes(make_messages, monkeypatch) -> None:
    """halfvec arrived in pgvector 0.7: an older extension gets vector indexes and vector ordering."""
    messages, vectors = make_messages("t1", 300), clustered(300)
    NumpyVectorStore().store(rows_for(messages, vectors, model=M))
    store = PgvectorStore(exact_max_rows=0, merge_after=None)
    monkeypatch.setitem(pgvector_index._pgvector_versions, connection.alias, (0, 6, 2))
    assert pgvector_index.index_type(connection) == "vector"
    store.ensure_index(M, 16)
    assert set(hnsw_indexes()) == {index_name(M, 16, "vector")}
    sql = store.search_sql(connection, embedder_id=M, query=vectors[0], top_k=3)
    assert "halfvec" not in sql and "hnsw.iterative_scan" not in sql  # 0.8's setting is left out too
    assert store.search(embedder_id=M, vector=vectors[0], top_k=1)[0].message_id == messages[0].id
    migration.forwards(None, SimpleNamespace(connection=FakeVersion(connection, "0.6.2")))
    assert set(hnsw_indexes()) == {index_name(M, 16, "vector")}  # not converted


class FakeVersion:
    """The test database's connection, answering the pgvector version query with `version`."""

    def __init__(self, connection, version: str) -> None:
        self._connection, self._version = connection, version
        self.vendor, self.ops = connection.vendor, connection.ops

    def cursor(self):
        real = self._connection.cursor()
        version = self._version

        class Cursor:
            def __enter__(self):
                real.__enter__()
                return self

            def __exit__(self, *exc):
                return real.__exit__(*exc)

            def execute(self, sql, params=None):
                self.faked = "pg_extension" in sql
                if not self.faked:
                    real.execute(sql, params)

            def fetchone(self):
                return (version,) if self.faked else real.fetchone()

            def fetchall(self):
                return real.fetchall()

        return Cursor()
