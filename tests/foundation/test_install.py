"""memproc added to a fresh `startproject` site exactly the way the README says."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SETTINGS_ADDITIONS = """
INSTALLED_APPS += ["rest_framework", "django_filters", "drf_spectacular", "memproc"]
MEMPROC = {"EMBEDDER": "memproc.testing.HashEmbedder"}
ALLOWED_HOSTS = ["testserver", "localhost"]
"""

URLS = """
from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/memproc/", include("memproc.urls")),
]
"""


def run(args: list[str], cwd: Path) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DJANGO_SETTINGS_MODULE": "mysite.settings"}
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


@pytest.mark.slow
def test_memproc_installs_into_a_fresh_startproject_site(tmp_path: Path) -> None:
    django_admin = [sys.executable, "-m", "django"]
    run([*django_admin, "startproject", "mysite", str(tmp_path)], cwd=tmp_path)
    settings = tmp_path / "mysite" / "settings.py"
    settings.write_text(settings.read_text() + SETTINGS_ADDITIONS)
    (tmp_path / "mysite" / "urls.py").write_text(URLS)
    manage = [sys.executable, "manage.py"]
    assert "Applying memproc.0001_initial... OK" in run([*manage, "migrate", "--noinput"], cwd=tmp_path)
    assert "no issues" in run([*manage, "check"], cwd=tmp_path)
    assert "No changes detected" in run([*manage, "makemigrations", "--check", "--dry-run"], cwd=tmp_path)
    out = run(
        [
            *manage,
            "shell",
            "-c",
            (
                "from django.test import Client; c = Client(); "
                "print(c.get('/api/memproc/').status_code, c.get('/admin/login/').status_code)"
            ),
        ],
        cwd=tmp_path,
    )
    assert "200 200" in out
