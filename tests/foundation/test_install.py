"""memproc added to a fresh `startproject` site from this checkout (PYTHONPATH), with no other setting.

The site keeps Django's and DRF's defaults: no `REST_FRAMEWORK` (so DRF's own `DEFAULT_SCHEMA_CLASS`),
no `SPECTACULAR_SETTINGS`, no static-files set-up for Swagger UI. tests/foundation/test_readme_verbatim.py
does the same from the built wheel, with the README's own snippets.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.foundation.test_readme_verbatim import assert_docs_page_is_self_contained, page_references

ROOT = Path(__file__).resolve().parents[2]

SETTINGS_ADDITIONS = """
INSTALLED_APPS += ["rest_framework", "django_filters", "drf_spectacular", "memproc"]
MEMPROC = {"EMBEDDER": "memproc.testing.HashEmbedder"}
ALLOWED_HOSTS = ["testserver", "localhost"]
"""
SPECTACULAR_DEFAULT = """
REST_FRAMEWORK = {"DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema"}
"""

URLS = """
from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/memproc/", include("memproc.urls")),
]
"""

# Run in the site: fetches pages with Django's test client and prints what it got as JSON.
PROBE = """
import json, sys
import django
django.setup()
from django.test import Client

client = Client()
urls = json.loads(sys.argv[1])
out = {}
for url in urls:
    response = client.get(url)
    body = b"".join(response.streaming_content) if response.streaming else response.content
    out[url] = [response.status_code, response.get("Content-Type", ""), body.decode("latin-1")]
print(json.dumps(out))
"""


def run(args: list[str], cwd: Path) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DJANGO_SETTINGS_MODULE": "mysite.settings"}
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def fetch(site: Path, *urls: str) -> dict[str, tuple[int, str, str]]:
    output = run([sys.executable, "probe.py", json.dumps(urls)], cwd=site)
    return {url: tuple(result) for url, result in json.loads(output.strip().splitlines()[-1]).items()}


@pytest.fixture
def site(tmp_path: Path) -> Path:
    run([sys.executable, "-m", "django", "startproject", "mysite", str(tmp_path)], cwd=tmp_path)
    settings = tmp_path / "mysite" / "settings.py"
    settings.write_text(settings.read_text() + SETTINGS_ADDITIONS)
    (tmp_path / "mysite" / "urls.py").write_text(URLS)
    (tmp_path / "probe.py").write_text(PROBE)
    return tmp_path


@pytest.mark.slow
def test_memproc_installs_into_a_fresh_startproject_site(site: Path) -> None:
    manage = [sys.executable, "manage.py"]
    assert "Applying memproc.0001_initial... OK" in run([*manage, "migrate", "--noinput"], cwd=site)
    assert "no issues" in run([*manage, "check", "--fail-level", "WARNING"], cwd=site)
    assert "No changes detected" in run([*manage, "makemigrations", "--check", "--dry-run"], cwd=site)
    pages = fetch(site, "/api/memproc/", "/admin/login/")
    assert [status for status, _, _ in pages.values()] == [200, 200]


@pytest.mark.slow
def test_the_schema_and_docs_need_no_rest_framework_setting(site: Path) -> None:
    """DRF's default DEFAULT_SCHEMA_CLASS once made `schema/` a 500 and `docs/` a blank page."""
    schema_url = "/api/memproc/schema/?format=json"
    pages = fetch(site, schema_url, "/api/memproc/docs/")
    status, content_type, document = pages[schema_url]
    assert status == 200, document[:3000]
    assert "/api/memproc/agents/{id}/generate/" in json.loads(document)["paths"]

    status, content_type, html = pages["/api/memproc/docs/"]
    assert status == 200 and content_type.startswith("text/html")
    refs: dict[str, tuple[int, str, str]] = {}

    def page_fetch(url: str) -> tuple[int, str, str]:
        return refs[url.removeprefix("http://testserver")]

    refs.update(fetch(site, *page_references(html).urls))
    assert_docs_page_is_self_contained(html, "http://testserver/api/memproc/docs/", page_fetch)

    # The same document as a project that points DEFAULT_SCHEMA_CLASS at drf-spectacular gets.
    settings = site / "mysite" / "settings.py"
    settings.write_text(settings.read_text() + SPECTACULAR_DEFAULT)
    assert fetch(site, schema_url)[schema_url] == pages[schema_url]


STRICT_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'"
)


@pytest.mark.browser
def test_the_docs_page_renders_offline_under_a_strict_content_security_policy(live_server, monkeypatch):
    """Swagger UI draws every operation with no other host reachable and no 'unsafe-inline'."""
    from playwright.sync_api import sync_playwright

    from tests.browser import CHROMIUM, LAUNCH_ARGS

    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's loop runs in this thread
    elsewhere: list[str] = []
    problems: list[str] = []

    def serve(route) -> None:
        if not route.request.url.startswith(live_server.url + "/"):
            elsewhere.append(route.request.url)
            route.abort()
            return
        response = route.fetch()
        headers = dict(response.headers)
        if route.request.resource_type == "document":  # the policy a strict site would send
            headers["content-security-policy"] = STRICT_CSP
        route.fulfill(response=response, headers=headers)

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        try:
            page = browser.new_page()
            page.route("**/*", serve)
            page.on("console", lambda m: problems.append(m.text) if m.type in ("error", "warning") else None)
            page.on("pageerror", lambda error: problems.append(str(error)))
            page.goto(f"{live_server.url}/api/memproc/docs/")
            page.wait_for_selector(".opblock", timeout=20000)
            assert page.locator(".opblock").count() >= 20
            assert "memproc API" in page.locator(".title").first.inner_text()
        finally:
            browser.close()
    assert elsewhere == [] and problems == []
