"""The documentation site: `mkdocs build --strict` succeeds, every page of the navigation is built, the
generated reference pages cover the code, and user-facing text cites no internal rule or issue numbers.

The site is built into a temp folder (never `site/` in the checkout), with the docs hook that runs
Django with the demo settings to generate the API, settings and command references.
"""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
# docs/testing.md is for contributors, and cites the design's rules by number on purpose.
CONTRIBUTOR_PAGES = {"testing.md"}
INTERNAL_NUMBERS = re.compile(r"\brules? \d+|\bissues? \d+|§", re.I)


def nav_pages(nav: list) -> list[str]:
    pages: list[str] = []
    for item in nav:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        if isinstance(value, list):
            pages += nav_pages(value)
        else:
            pages.append(value)
    return pages


def built_path(site: Path, page: str) -> Path:
    """Where MkDocs writes a page with directory URLs: a/b.md -> a/b/index.html, index.md -> index.html."""
    stem = page.removesuffix(".md")
    if stem == "index" or stem.endswith("/index"):
        return site / stem.removesuffix("index") / "index.html"
    return site / stem / "index.html"


def article_text(path: Path) -> str:
    page = path.read_text()
    article = page[page.index("<article") : page.index("</article>")]
    article = re.sub(r"<(script|style)\b.*?</\1>", " ", article, flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", " ", article))


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    try:
        import material  # noqa: F401
        import mkdocs  # noqa: F401
    except ImportError:
        if os.environ.get("CI"):
            raise
        pytest.skip("mkdocs and mkdocs-material are not installed (the docs extra)")
    out = tmp_path_factory.mktemp("docs") / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(ROOT / "mkdocs.yml"),
         "--site-dir", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout}\n{done.stderr}"
    return out


@pytest.fixture(scope="module")
def nav() -> list[str]:
    import yaml

    return nav_pages(yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"])


def test_every_page_of_the_navigation_is_built(site, nav):
    assert "index.md" in nav and "reference/api.md" in nav
    for page in nav:
        path = built_path(site, page)
        assert path.is_file(), f"{page} was not built ({path})"
        first_heading = next(line for line in (DOCS / page).read_text().splitlines() if line.startswith("# "))
        assert html.escape(first_heading[2:].strip(), quote=False) in path.read_text(), page
    assert not (site / "hooks.py").exists(), "the docs hook is not a page of the site"


def test_every_markdown_page_is_in_the_navigation(nav):
    pages = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    assert pages == set(nav)


def test_the_site_loads_nothing_from_other_hosts(site):
    """Fonts and scripts come with the site (theme.font: false), so it reads offline."""
    for path in site.rglob("*.html"):
        page = path.read_text()
        external = re.findall(r"""<(?:script|link|img)\b[^>]*\b(?:src|href)=["'](?:https?:)?//[^"']+""", page)
        assert not external, (path, external)
        assert "fonts.googleapis.com" not in page and "fonts.gstatic.com" not in page, path


def test_the_api_reference_lists_every_operation_of_the_openapi_document(site):
    text = article_text(built_path(site, "reference/api.md"))
    from drf_spectacular.settings import patched_settings

    from memproc.api.schema import SCHEMA_SETTINGS, MemprocSchemaGenerator

    # The suite's settings are the demo's (tests/settings.py), so the paths agree with the page's.
    with patched_settings(SCHEMA_SETTINGS):
        schema = MemprocSchemaGenerator().get_schema(request=None, public=True)
    operations = [(m.upper(), p) for p, ops in schema["paths"].items() for m in ops]
    assert len(operations) > 20
    missing = [f"{m} {p}" for m, p in operations if f"{m} {p}" not in text]
    assert not missing
    for name in schema["components"]["schemas"]:
        assert name in text, name
    assert "Run one turn and answer its result" in text  # a summary
    assert "Idempotency-Key" in text  # a header parameter


def test_the_settings_reference_has_every_setting_with_its_default(site):
    from memproc.conf import DEFAULTS

    page = built_path(site, "reference/settings.md").read_text()
    rows = dict(re.findall(r"<tr>\s*<td><code>([A-Z_]+)</code>.*?</td>\s*<td>(.*?)</td>", page, re.S))
    assert set(DEFAULTS) <= set(rows) | {"HNSW_EF_CONSTRUCTION"}  # one row holds HNSW_M and it
    assert "HNSW_EF_CONSTRUCTION" in page
    assert html.unescape(rows["EMBEDDER"]) == '<code>"memproc.embedders.MiniLMEmbedder"</code>'
    assert "<code>32</code>" in rows["ASYNC_THREADS"]
    assert "memproc.E001" in page  # the system checks' table


def test_the_commands_reference_has_every_command_and_task(site):
    from django.core.management import get_commands

    from memproc.tasks import TASKS

    text = article_text(built_path(site, "reference/commands.md"))
    commands = [name for name, app in get_commands().items() if app == "memproc"]
    assert commands
    for name in commands:
        assert name in text, name
    assert "--merge-index" in text and "--retry-parked" in text  # arguments, from the parsers
    for task in TASKS:
        assert task in text, task


def test_built_pages_cite_no_internal_rule_or_issue_numbers(site, nav):
    """Generated text too: the OpenAPI descriptions and the commands' help."""
    for page in nav:
        if page in CONTRIBUTOR_PAGES:
            continue
        found = INTERNAL_NUMBERS.findall(article_text(built_path(site, page)))
        assert not found, (page, found)


def user_facing_markdown() -> list[Path]:
    return [ROOT / "README.md"] + [
        p for p in sorted(DOCS.rglob("*.md")) if str(p.relative_to(DOCS)) not in CONTRIBUTOR_PAGES
    ]


def test_user_facing_markdown_cites_no_internal_rule_or_issue_numbers():
    offending = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in user_facing_markdown()
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if INTERNAL_NUMBERS.search(line)
    ]
    assert not offending


def test_the_readme_stays_short_and_keeps_the_two_commands():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    assert "scripts/demo    # installs memproc into .venv and runs the demo site" in readme
    assert "scripts/test    # installs what the tests need and runs the whole suite" in readme
    for link in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (ROOT / link).exists(), link
