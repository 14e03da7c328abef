from __future__ import annotations

import pytest
from django.core.management import call_command
from django.test import override_settings

from memproc.checks import check_settings, check_vector_search
from memproc.conf import settings as memproc_settings


def ids(messages) -> list[str]:
    return [m.id for m in messages]


def test_defaults_are_read_lazily_and_follow_override_settings():
    assert memproc_settings.BACKGROUND == "inline"
    with override_settings(MEMPROC={"BACKGROUND": "celery"}):
        assert memproc_settings.BACKGROUND == "celery"
        assert memproc_settings.STORE_BLOCKED_CONTENT is True  # default
    assert memproc_settings.BACKGROUND == "inline"


def test_unknown_setting_attribute_is_an_error():
    with pytest.raises(AttributeError, match="no setting 'NOPE'"):
        memproc_settings.NOPE  # noqa: B018


def test_unknown_key_is_check_error_with_hint():
    with override_settings(MEMPROC={"EMBEDER": "x"}):
        errors = check_settings()
    assert ids(errors) == ["memproc.E001"] and "Known keys" in errors[0].hint


def test_unimportable_dotted_path_is_check_error():
    with override_settings(MEMPROC={"EMBEDDER": "nowhere.Embedder"}):
        errors = check_settings()
    assert ids(errors) == ["memproc.E002"] and errors[0].hint


def test_bad_background_mode_is_check_error():
    with override_settings(MEMPROC={"BACKGROUND": "threads"}):
        assert ids(check_settings()) == ["memproc.E004"]


@pytest.mark.django_db
def test_default_configuration_passes_checks():
    assert check_settings() == []
    call_command("check", "--fail-level", "ERROR")


@pytest.mark.django_db
def test_semantic_recall_without_pgvector_warns(on_postgres):
    from memproc import Agent, Memory
    from memproc.agents import register, unregister

    register(Agent(id="recaller", memory=Memory(semantic_recall=True)))
    try:
        warnings = check_vector_search()
    finally:
        unregister("recaller")
    if on_postgres:
        assert warnings == []
    else:
        assert ids(warnings) == ["memproc.W001"] and "pgvector" in warnings[0].hint


@pytest.mark.django_db
def test_makemigrations_is_clean():
    call_command("makemigrations", "memproc", "--check", "--dry-run", verbosity=0)


@pytest.mark.django_db
def test_demo_site_serves_admin_and_api(client):
    assert client.get("/api/memproc/").status_code == 200
    assert client.get("/admin/login/").status_code == 200
