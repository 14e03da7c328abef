"""The TypeScript client in clients/typescript (docs/guides/typescript-client.md).

Its committed OpenAPI document must be the one the API serves now, so an endpoint added without
regenerating the client fails here with the command to run. The tests marked `node` (lane A of
scripts/test only) install the locked npm packages when they are missing (`npm ci`), check that
src/schema.d.ts is what openapi-typescript makes of openapi.json, type-check the client with `tsc`,
and run its node:test suite against a live server. Without Node.js and npm they are skipped, except
in CI (`CI` or `MEMPROC_REQUIRE_NODE` set), where the run stops (tests/conftest.py).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
from rest_framework.test import APIClient

from memproc import Memory, models
from memproc.llm.types import ModelRequest, ModelResponse
from tests.api.conftest import API, BlockWord

CLIENT_DIR = Path(__file__).resolve().parents[2] / "clients" / "typescript"
REGENERATE = "cd clients/typescript && npm run generate"
PROFILE = {"type": "object", "properties": {"name": {"type": "string"}}, "additionalProperties": False}


def relative_to_mount(document: dict[str, Any]) -> dict[str, Any]:
    """The document with its paths relative to where the site mounts memproc, as
    clients/typescript/scripts/generate.mjs writes it: the API root is one of the paths, so their
    common prefix up to its last "/" is the mount point."""
    paths = list(document["paths"])
    prefix = os.path.commonprefix(paths)
    prefix = prefix[: prefix.rindex("/")]
    return {**document, "paths": {path[len(prefix) :]: document["paths"][path] for path in paths}}


def differences(committed: dict[str, Any], served: dict[str, Any]) -> list[str]:
    """What changed, by path and component, for the failure message."""
    found = []
    for section, old, new in (
        ("path", committed.get("paths", {}), served["paths"]),
        ("schema", committed.get("components", {}).get("schemas", {}), served["components"]["schemas"]),
    ):
        found += [f"new {section} {name}" for name in sorted(new.keys() - old.keys())]
        found += [f"removed {section} {name}" for name in sorted(old.keys() - new.keys())]
        found += [
            f"changed {section} {name}" for name in sorted(old.keys() & new.keys()) if old[name] != new[name]
        ]
    if not found:
        found = [
            f"changed {key}"
            for key in sorted(committed.keys() | served.keys())
            if committed.get(key) != served.get(key)
        ]
    return found


def test_the_committed_openapi_document_is_the_one_the_api_serves():
    response = APIClient().get(API + "schema/", {"format": "json"})
    assert response.status_code == 200
    served = relative_to_mount(response.json())
    committed = json.loads((CLIENT_DIR / "openapi.json").read_text())
    if committed != served:
        changes = differences(committed, served)
        pytest.fail(
            "clients/typescript/openapi.json is not the document the API serves "
            f"({'; '.join(changes[:10])}{'; ...' if len(changes) > 10 else ''}). "
            f"Run `{REGENERATE}` and commit openapi.json and src/schema.d.ts.",
            pytrace=False,
        )


def test_paths_are_relative_to_the_mount_point():
    document = {"paths": {"/api/memproc/": {}, "/api/memproc/threads/": {}, "/api/memproc/memory/": {}}}
    assert list(relative_to_mount(document)["paths"]) == ["/", "/threads/", "/memory/"]


# --- with Node.js ---------------------------------------------------------------------------------


def npm_ci_needed() -> bool:
    """Whether node_modules is missing or holds other versions than package-lock.json."""
    installed = CLIENT_DIR / "node_modules" / ".package-lock.json"
    if not installed.exists():
        return True

    def versions(lock: Path) -> dict[str, str]:
        packages = json.loads(lock.read_text())["packages"]
        return {path: entry.get("version", "") for path, entry in packages.items() if path}

    return versions(installed) != versions(CLIENT_DIR / "package-lock.json")


@pytest.fixture(scope="module")
def npm() -> str:
    """npm, with the client's locked packages installed (once per checkout; another run installing at
    the same time is waited for)."""
    npm = shutil.which("npm")
    assert npm, "tests/conftest.py skips `node` tests without npm"
    lock = (
        Path(tempfile.gettempdir()) / f"memproc-npm-{hashlib.sha1(bytes(CLIENT_DIR)).hexdigest()[:12]}.lock"
    )
    with lock.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        if npm_ci_needed():
            run([npm, "ci", "--no-audit", "--no-fund"], timeout=600)
    return npm


def run(command: list[str], *, env: dict[str, str] | None = None, timeout: int = 180) -> str:
    done = subprocess.run(
        command,
        cwd=CLIENT_DIR,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"`{' '.join(command[1:])}` failed in clients/typescript:\n{output}"
    return output


@pytest.mark.node
def test_the_types_are_generated_from_the_committed_document(npm):
    done = subprocess.run(
        [npm, "run", "--silent", "types", "--", "--check"], cwd=CLIENT_DIR, capture_output=True, text=True
    )
    assert done.returncode == 0, (
        f"clients/typescript/src/schema.d.ts is not what openapi-typescript makes of openapi.json: "
        f"run `{REGENERATE}`.\n{done.stdout}{done.stderr}"
    )


@pytest.mark.node
def test_the_client_type_checks(npm):
    run([npm, "run", "--silent", "typecheck"])  # tsc --noEmit, strict, over src/ and test/


class EchoModel:
    """Answers "Echo: <the last message's text>"."""

    id = "test/echo"

    def generate(self, request: ModelRequest) -> ModelResponse:
        return ModelResponse(text=f"Echo: {request.messages[-1].text}")


@pytest.mark.node
@pytest.mark.django_db(transaction=True)
def test_the_client_against_a_live_server(npm, live_server, make_agent, user, resource, other_user, staff):
    from django.contrib.auth.models import Permission
    from django.test import Client
    from rest_framework.authtoken.models import Token

    from tests.factories import ResourceFactory, ThreadFactory

    make_agent(
        id="ts-agent",
        model=EchoModel(),
        input_processors=[BlockWord()],
        memory=Memory(working_memory={"schema": PROFILE}),
    )
    foreign = ThreadFactory(id="foreign-thread", resource=ResourceFactory(id=str(other_user.pk)))
    staff.user_permissions.add(Permission.objects.get(codename="view_tripwirelog"))
    browser = Client()
    browser.force_login(user)
    csrf = "c" * 32  # the cookie holds the secret; the header may carry it unmasked
    output = run(
        [npm, "test"],
        env={
            "MEMPROC_BASE_URL": live_server.url + API.rstrip("/"),
            "MEMPROC_AGENT": "ts-agent",
            "MEMPROC_TOKEN": Token.objects.create(user=user).key,
            "MEMPROC_RESOURCE": resource.id,
            "MEMPROC_STAFF_TOKEN": Token.objects.create(user=staff).key,
            "MEMPROC_SESSION": browser.cookies["sessionid"].value,
            "MEMPROC_CSRF": csrf,
            "MEMPROC_FOREIGN_THREAD": foreign.public_id,
            "NO_PROXY": "127.0.0.1,localhost",
        },
    )
    counts = dict(line[2:].split(" ", 1) for line in output.splitlines() if line.startswith("# "))
    # test/live.test.ts (7), test/csrf.test.ts (4) and test/types.test.ts (1), all run, all passed
    assert (counts.get("tests"), counts.get("pass")) == ("12", "12"), output

    # What the client did is stored.
    thread = models.Thread.objects.get(public_id="ts-thread", resource_id=resource.id)
    assert [m.text for m in models.Message.objects.filter(thread=thread).order_by("sequence")] == [
        "hello",
        "Echo: hello",
        "again",
        "Echo: again",
    ]
    assert models.TripwireLog.objects.get().thread_id == "ts-blocked"
    assert not models.Thread.objects.filter(public_id="ts-blocked").exists()
