"""A kept database connection that the server dropped (a restart) does not fail a request when
CONN_HEALTH_CHECKS is on (finding 11 of the third hostile review: after a PostgreSQL restart 16 of 45
turns answered 503 with the demo's CONN_MAX_AGE=60). The demo sets it, and `manage.py check` warns
(memproc.W007) where a site keeps connections without it."""

from __future__ import annotations

import pytest
from django.db import DatabaseError, connection, connections

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def kept_connection(*, health_checks: bool):
    wrapper = type(connections["default"])(
        {**connection.settings_dict, "CONN_MAX_AGE": 60, "CONN_HEALTH_CHECKS": health_checks}, "default"
    )
    wrapper.ensure_connection()
    return wrapper


def restart_drops(kept) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [kept.connection.info.backend_pid])


def next_request_reads(kept) -> None:
    kept.close_if_unusable_or_obsolete()  # what Django does when a request starts
    with kept.cursor() as cursor:
        cursor.execute("SELECT 1")


def test_with_health_checks_the_next_request_gets_a_fresh_connection() -> None:
    kept = kept_connection(health_checks=True)
    try:
        restart_drops(kept)
        next_request_reads(kept)
    finally:
        kept.close()


def test_without_them_the_next_request_fails_on_the_stale_one() -> None:
    kept = kept_connection(health_checks=False)
    try:
        restart_drops(kept)
        with pytest.raises(DatabaseError):
            next_request_reads(kept)
    finally:
        kept.close()
