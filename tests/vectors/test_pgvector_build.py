"""The HNSW index is built off the request: stores and searches run no DDL, a background job builds it
CONCURRENTLY once the embedder has HNSW_BUILD_MIN_ROWS rows, searches are exact until it is valid, and
`memproc_index` and the admin show its state."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
from django.core.management import call_command
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from memproc.vectors import NumpyVectorStore, PgvectorStore
from memproc.vectors.pgvector_index import index_name, index_sql, index_state
from memproc.vectors.pgvector_maintenance import index_build_due, index_status
from tests.vectors.helpers import clustered, exact_ranking, explain, hnsw_indexes, rows_for

M = "m16"
NAME = index_name(M, 16)


def other_session() -> Any:
    """A raw connection of its own to the test database (another process, as far as PostgreSQL knows)."""
    conn = connection.get_new_connection(connection.get_connection_params())
    conn.autocommit = True
    return conn


@contextmanager
def writer_holding_the_table() -> Iterator[Any]:
    """An open transaction that may write to the embeddings table: CREATE INDEX CONCURRENTLY waits
    for it after creating its (not yet valid) index, so a build stays "building" until it ends."""
    conn = other_session()
    conn.autocommit = False
    conn.execute("LOCK TABLE memproc_messageembedding IN ROW EXCLUSIVE MODE")
    try:
        yield conn
    finally:
        conn.rollback()
        conn.close()


def wait_for_state(state: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while index_state(connection, NAME)[0] != state:
        assert time.monotonic() < deadline, f"{NAME} never became {state}: {index_state(connection, NAME)}"
        time.sleep(0.05)


def status_output() -> str:
    from io import StringIO

    out = StringIO()
    call_command("memproc_index", "--status", stdout=out)
    return out.getvalue()


def searched(store: PgvectorStore, rows: list, query: np.ndarray, **scope: Any) -> tuple[list, list]:
    hits = store.search(embedder_id=M, vector=query, top_k=10, **scope)
    want = exact_ranking(rows, query, top_k=10)
    return [h.message_id for h in hits], [message_id for message_id, _ in want]


@pytest.fixture(autouse=True)
def fresh_counts():
    """Each test counts its own unmarked rows (the counts that send merges are per process)."""
    from memproc.vectors import pgvector_store

    pgvector_store._unmerged.clear()
    yield
    pgvector_store._unmerged.clear()


@pytest.fixture(autouse=True)
def no_index_left(db, on_postgres):
    """Indexes outlive the truncation between transactional tests: each test starts with none."""
    yield
    if not on_postgres:
        return
    with connection.cursor() as cursor:
        for name in hnsw_indexes():
            cursor.execute(f"DROP INDEX IF EXISTS {name}")


def in_thread(work: Any, results: list) -> threading.Thread:
    """`work()` in a thread with its own database connection, closed at the end."""

    def run() -> None:
        try:
            results.append(work())
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


@pytest.fixture
def min_rows(settings):
    def set_min_rows(n: int) -> None:
        settings.MEMPROC = {**getattr(settings, "MEMPROC", {}), "HNSW_BUILD_MIN_ROWS": n}

    return set_min_rows


def test_the_command_on_sqlite_says_there_is_nothing_to_do(db, on_postgres) -> None:
    if on_postgres:
        pytest.skip("SQLite only")
    for option in ("--status", "--build"):
        from io import StringIO

        out = StringIO()
        call_command("memproc_index", option, stdout=out)
        assert "Nothing to do" in out.getvalue()
    assert index_build_due() == {} and index_status() == []


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_stores_and_searches_run_no_ddl_and_answer_exactly(make_messages) -> None:
    messages = make_messages("t1", 40)
    rows = rows_for(messages, clustered(40), model=M)
    store = PgvectorStore(exact_max_rows=0)  # every scope "large": only the missing index keeps it exact
    with CaptureQueriesContext(connection) as queries:
        store.store(rows[:20])
        store.store(rows[20:])
        got, want = searched(store, rows, rows[7].vector)
        got_r, want_r = searched(store, rows, rows[9].vector, resource_id="r1")
    ddl = [
        q["sql"]
        for q in queries.captured_queries
        if re.search(r"\b(CREATE|DROP|ALTER|REINDEX)\b", q["sql"], re.I)
    ]
    assert ddl == []
    assert hnsw_indexes() == {}
    assert got == want and got_r == want_r
    assert "none" in status_output()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_large_scope_is_exact_until_the_index_is_valid_then_uses_it(make_messages) -> None:
    messages = make_messages("t1", 3000)
    vectors = clustered(3000, seed=5)
    rows = rows_for(messages, vectors, model=M)
    NumpyVectorStore().store(rows)  # marked rows, as a bulk load writes them
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE memproc_messageembedding")
    # ef_search 1 and no exact-scope limit: through the index the answer would be approximate.
    store = PgvectorStore(exact_max_rows=0, ef_search=1)
    query = vectors[11] / np.linalg.norm(vectors[11])
    assert f"using {NAME}" not in explain(store.search_sql(connection, embedder_id=M, query=query, top_k=10))
    for q in (11, 500, 2999):
        got, want = searched(store, rows, vectors[q])
        assert got == want
    assert index_build_due(embedder_id=M, dimensions=16, force=True) == {NAME: "built"}
    assert index_state(connection, NAME)[0] == "valid"
    assert f"using {NAME}" in explain(store.search_sql(connection, embedder_id=M, query=query, top_k=10))
    got, want = searched(PgvectorStore(exact_max_rows=0), rows, vectors[11])
    assert len(set(got) & set(want)) >= 9


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_search_during_a_build_is_exact_and_status_says_building(make_messages) -> None:
    messages = make_messages("t1", 1500)
    vectors = clustered(1500, seed=6)
    rows = rows_for(messages, vectors, model=M)
    NumpyVectorStore().store(rows)
    results: list[dict[str, str]] = []
    with writer_holding_the_table():
        builder = in_thread(lambda: index_build_due(embedder_id=M, dimensions=16, force=True), results)
        wait_for_state("building")
        assert f"{NAME}  building" in status_output()
        store = PgvectorStore(exact_max_rows=0, ef_search=1)
        query = vectors[3] / np.linalg.norm(vectors[3])
        assert f"using {NAME}" not in explain(
            store.search_sql(connection, embedder_id=M, query=query, top_k=10)
        )
        for q in (3, 700):
            got, want = searched(store, rows, vectors[q])
            assert got == want
        # A second worker does not build the same index: it finds the lock held and goes.
        assert index_build_due(embedder_id=M, dimensions=16, force=True) == {NAME: "busy"}
    builder.join(timeout=60)
    assert results == [{NAME: "built"}]
    assert index_state(connection, NAME)[0] == "valid"
    assert f"{NAME}  valid" in status_output()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_an_interrupted_build_is_reported_invalid_and_the_next_build_replaces_it(make_messages) -> None:
    messages = make_messages("t1", 300)
    rows = rows_for(messages, clustered(300, seed=7), model=M)
    NumpyVectorStore().store(rows)
    killed = other_session()
    errors: list[BaseException] = []

    def build_then_die() -> None:
        try:
            killed.execute(index_sql(connection, M, 16, concurrently=True))
        except Exception as exc:  # the cancel below
            errors.append(exc)

    with writer_holding_the_table():
        builder = threading.Thread(target=build_then_die)
        builder.start()
        wait_for_state("building")
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_cancel_backend(%s)", [killed.info.backend_pid])
        builder.join(timeout=30)
    killed.close()
    assert errors, "the build was not interrupted"
    assert index_state(connection, NAME)[0] == "invalid"
    assert f"{NAME}  invalid" in status_output()
    got, want = searched(PgvectorStore(exact_max_rows=0, ef_search=1), rows, rows[5].vector)
    assert got == want  # the leftover is never used
    from io import StringIO

    out = StringIO()
    call_command("memproc_index", "--build", stdout=out)
    assert f"Built {NAME}." in out.getvalue() and f"{NAME}  valid" in out.getvalue()
    assert list(hnsw_indexes()) == [NAME]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_the_job_builds_only_once_the_embedder_outgrew_exact_search(make_messages, min_rows) -> None:
    min_rows(50)
    messages = make_messages("t1", 60)
    store = PgvectorStore(merge_after=None)
    store.store(rows_for(messages[:40], clustered(40), model=M))
    assert index_build_due() == {NAME: "small"}
    assert index_state(connection, NAME)[0] == "none"
    store.store(rows_for(messages[40:], clustered(20, seed=1), model=M))
    assert index_build_due() == {NAME: "built"}
    assert index_build_due() == {NAME: "valid"}  # idempotent
    # The rows written unmarked (the tail) were folded in first: the graph holds every row.
    with connection.cursor() as cursor:
        cursor.execute("SELECT COUNT(*) FROM memproc_messageembedding WHERE NOT indexed")
        assert cursor.fetchone()[0] == 0
    [status] = index_status()
    assert (status.model, status.dimensions, status.rows, status.state) == (M, 16, 60, "valid")
    assert status.size and status.size > 0


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_the_merge_sent_by_writes_builds_the_index_once_it_pays(make_messages, min_rows) -> None:
    min_rows(30)
    messages = make_messages("t1", 40)
    store = PgvectorStore(merge_after=20)
    store.store(rows_for(messages[:20], clustered(20), model=M))  # a merge, below the threshold
    join_index_threads()
    assert index_state(connection, NAME)[0] == "none"
    store.store(rows_for(messages[20:], clustered(20, seed=3), model=M))  # the next one builds
    join_index_threads()
    assert index_state(connection, NAME)[0] == "valid"


@pytest.mark.postgres
def test_the_build_job_is_a_registered_task_and_goes_through_the_outbox(settings) -> None:
    from memproc import background
    from memproc.models import OutboxJob

    assert "memproc.build_index" in background.TASKS
    settings.MEMPROC = {**getattr(settings, "MEMPROC", {}), "BACKGROUND": "celery"}
    background.enqueue("memproc.build_index", kwargs={"embedder_id": M, "dimensions": 16})
    assert OutboxJob.objects.get().task == "memproc.build_index"


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_the_admin_shows_each_embedders_index_state_to_staff_only(make_messages, client, admin_user) -> None:
    from django.contrib.auth import get_user_model

    NumpyVectorStore().store(rows_for(make_messages("t1", 5), clustered(5), model=M))
    url = reverse("admin:memproc_messageembedding_changelist")
    client.force_login(admin_user)
    page = client.get(url)
    assert page.status_code == 200
    html = page.content.decode()
    assert 'id="memproc-vector-indexes"' in html and NAME in html and 'data-state="none"' in html
    PgvectorStore().build_index(M, 16)
    assert 'data-state="valid"' in client.get(url).content.decode()
    visitor = get_user_model().objects.create_user("visitor", password="x", is_staff=False)
    client.force_login(visitor)
    denied = client.get(url)
    assert denied.status_code == 302 and NAME not in denied.content.decode()


def join_index_threads() -> None:
    for thread in threading.enumerate():
        if thread.name in ("memproc-index-build", "memproc-index-merge"):
            thread.join(timeout=60)
