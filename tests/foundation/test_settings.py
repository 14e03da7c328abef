from __future__ import annotations

import pytest
from django.core.management import call_command
from django.test import override_settings

from memproc.conf import settings as memproc_settings


def test_defaults_are_read_lazily_and_follow_override_settings():
    assert memproc_settings.BACKGROUND == "inline"
    with override_settings(MEMPROC={"BACKGROUND": "celery"}):
        assert memproc_settings.BACKGROUND == "celery"
        assert memproc_settings.STORE_BLOCKED_CONTENT is True  # default
    assert memproc_settings.BACKGROUND == "inline"


def test_unknown_setting_attribute_is_an_error():
    with pytest.raises(AttributeError, match="no setting 'NOPE'"):
        memproc_settings.NOPE  # noqa: B018


@pytest.mark.django_db
def test_makemigrations_is_clean():
    call_command("makemigrations", "memproc", "--check", "--dry-run", verbosity=0)


@pytest.mark.django_db
def test_demo_site_serves_admin_and_api(client):
    assert client.get("/api/memproc/").status_code == 200
    assert client.get("/admin/login/").status_code == 200
