"""The layers of DESIGN.md §7, checked by import-linter with the contract in pyproject.toml."""

from __future__ import annotations

import pkgutil
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import memproc

ROOT = Path(__file__).resolve().parents[2]
# Not code the app imports: the migrations import the app, never the other way round.
UNLAYERED = {"memproc.migrations"}


def contract() -> dict:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    [layers] = [c for c in config["contracts"] if c["type"] == "layers"]
    return {**config, "layers": layers}


def lint_imports() -> str:
    beside_python = Path(sys.executable).with_name("lint-imports")
    executable = str(beside_python) if beside_python.exists() else shutil.which("lint-imports")
    assert executable, 'lint-imports is missing: pip install -e ".[dev]" (import-linter)'
    return executable


def test_no_module_imports_a_higher_layer():
    result = subprocess.run(
        [lint_imports(), "--no-cache", "--no-logo"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    report = result.stdout + result.stderr
    assert result.returncode == 0, f"import-linter found imports against the layers:\n{report}"


def test_the_contract_counts_imports_inside_functions_but_not_type_checking_ones():
    config = contract()
    assert config["root_package"] == "memproc"
    assert config["exclude_type_checking_imports"] is True


def test_every_top_level_module_of_the_app_sits_in_one_layer():
    layered = [
        name.strip()
        for layer in contract()["layers"]["layers"]
        for name in layer.replace("|", ":").split(":")
    ]
    top_level = {f"memproc.{info.name}" for info in pkgutil.iter_modules(memproc.__path__)} - UNLAYERED
    assert sorted(layered) == sorted(set(layered)), "a module is in more than one layer"
    assert set(layered) == top_level


def test_no_import_cycle_at_module_level():
    """Module-level imports form no cycle inside memproc (a cycle breaks whichever module a process
    happens to import first). Imports inside functions and TYPE_CHECKING blocks are left out."""
    import grimp

    graph = grimp.build_graph("memproc", exclude_type_checking_imports=True)
    edges: dict[str, set[str]] = {}
    for importer in graph.modules:
        for imported in graph.find_modules_directly_imported_by(importer):
            details = graph.get_import_details(importer=importer, imported=imported)
            if any(not d.get("is_lazy", d["line_contents"].startswith((" ", "\t"))) for d in details):
                edges.setdefault(importer, set()).add(imported)
    cycle = _find_cycle(edges)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def _find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (found := visit(node)):
            return found
    return None
