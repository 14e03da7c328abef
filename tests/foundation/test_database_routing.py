"""Every transaction and after-commit callback names memproc's database (the router's answer).

Without `using=`, `transaction.atomic()` opens a transaction on the default database while a site's
router writes memproc's rows elsewhere, each in autocommit: a turn saved in halves. `on_commit` then
waits for the wrong commit, or runs at once. `--db=routed` (tests/routing.py) runs the API's tests
with memproc's tables in a second database; this test keeps the rule for code those tests miss.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

import memproc
from tests.attachments.conftest import fs_storage  # noqa: F401  autouse: a file storage per test

PACKAGE = Path(memproc.__file__).parent


def package_nodes() -> Iterator[tuple[str, ast.AST]]:
    """(path from the package's parent, node) for every syntax node of memproc outside migrations."""
    for path in sorted(PACKAGE.rglob("*.py")):
        if "migrations" not in path.parts:
            name = str(path.relative_to(PACKAGE.parent))
            yield from ((name, node) for node in ast.walk(ast.parse(path.read_text(), str(path))))


def is_transaction(node: ast.AST, *attributes: str) -> bool:
    """`node` is `transaction.<one of attributes>`."""
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "transaction"
        and node.attr in attributes
    )


def transaction_calls_without_using() -> list[str]:
    return [
        f"{path}:{node.lineno} transaction.{node.func.attr}"  # type: ignore[attr-defined]
        for path, node in package_nodes()
        if isinstance(node, ast.Call)
        and is_transaction(node.func, "atomic", "on_commit")
        and not any(k.arg == "using" for k in node.keywords)
    ]


def bare_atomic_decorators() -> list[str]:
    """`@transaction.atomic` without a call: its transaction is the default database's, always."""
    return [
        f"{path}:{decorator.lineno} @transaction.atomic"
        for path, node in package_nodes()
        for decorator in getattr(node, "decorator_list", ())
        if is_transaction(decorator, "atomic")
    ]


def test_every_transaction_and_on_commit_names_its_database() -> None:
    assert transaction_calls_without_using() == []


def test_no_service_is_decorated_with_the_default_databases_transaction() -> None:
    assert bare_atomic_decorators() == []


def test_the_decorator_scan_finds_a_bare_decorator(tmp_path, monkeypatch) -> None:
    (tmp_path / "bad.py").write_text(
        "from django.db import transaction\n\n@transaction.atomic\ndef f():\n    pass\n"
    )
    monkeypatch.setattr(f"{__name__}.PACKAGE", tmp_path)
    assert bare_atomic_decorators() == [f"{tmp_path.name}/bad.py:3 @transaction.atomic"]


def test_the_scan_finds_a_call_without_using(tmp_path, monkeypatch) -> None:
    (tmp_path / "bad.py").write_text(
        "from django.db import transaction\nwith transaction.atomic():\n    pass\n"
    )
    monkeypatch.setattr(f"{__name__}.PACKAGE", tmp_path)
    assert transaction_calls_without_using() == [f"{tmp_path.name}/bad.py:2 transaction.atomic"]


@pytest.mark.django_db(databases="__all__")
def test_under_a_router_memprocs_tables_live_only_in_its_database(request) -> None:
    if request.config.getoption("--db") != "routed":
        pytest.skip("the layout of --db=routed")
    from django.db import connections

    from memproc.db import memproc_db

    assert memproc_db() == "memory"
    assert not [t for t in connections["default"].introspection.table_names() if t.startswith("memproc_")]
    assert "memproc_message" in connections["memory"].introspection.table_names()
    assert "auth_user" not in connections["memory"].introspection.table_names()


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_a_thread_delete_that_fails_midway_keeps_its_messages_and_files(monkeypatch) -> None:
    """The delete releases the thread's files (rows now, files after commit) before the thread row
    goes: under a router, a transaction on the wrong database let each step commit on its own, and
    the file's removal run at once, so a failure after it lost the file of a message still stored."""
    from memproc import Memory, models
    from memproc.services.threads import thread_delete
    from tests.attachments.conftest import file_message, png, stored_files

    Memory().save_messages([file_message(png())], thread_id="t", resource_id="r", embed=False)
    files = stored_files()
    assert len(files) == 1 and models.Attachment.objects.count() == 1

    def fails(self, *args, **kwargs):
        raise RuntimeError("the database went away")

    monkeypatch.setattr(models.Thread, "delete", fails)
    with pytest.raises(RuntimeError):
        thread_delete(thread=models.Thread.objects.get())
    assert models.Message.objects.count() == 1
    assert models.Attachment.objects.count() == 1
    assert stored_files() == files
