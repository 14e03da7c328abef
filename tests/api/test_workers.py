"""Two uvicorn worker processes on one PostgreSQL: concurrent streamed turns spread over a few threads,
every turn's messages stored once.

Nothing in memproc is shared between processes but the database: the admission permits, the worker
threads and the caches are each process's own (docs/guides/deploying.md, "What holds per process and
what across processes"). This is what a site run with `uvicorn --workers 2` does: two processes save
turns to the same threads at the same time, and the thread's row lock, not a Python lock, orders them.

The servers are real (bench/concurrency.py's: the loopback model, bench/concurrency_site under
`uvicorn --workers 2`), on a database of their own on the suite's embedded PostgreSQL.
MEMPROC_WORKERS_TEST_TURNS sets the number of turns (60 by default: ~20 s; 300 is the deployment
target's size, with `max_connections` 100).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from bench.concurrency import (
    ENDPOINTS,
    PASSWORD,
    PROMPT,
    USERNAME,
    Client,
    LogWatch,
    cpu_seconds,
    free_port,
    model_server,
    process_tree,
    site_environment,
    site_server,
)

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

TURNS = int(os.environ.get("MEMPROC_WORKERS_TEST_TURNS", "60"))
THREADS = 6  # the thread set: each thread gets TURNS / THREADS of the turns, all started at once
WORKERS = 2
BURSTS = 3  # at most: see the test


@pytest.fixture
def database() -> Iterator[dict[str, str]]:
    """A database of this test's own on the suite's PostgreSQL (the servers migrate it), dropped after."""
    import psycopg
    from django.conf import settings

    default = settings.DATABASES["default"]
    server = {"host": default["HOST"], "port": default["PORT"], "user": "postgres"}
    name = f"memproc_workers_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(**server, dbname="postgres", autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield {"BENCH_PG_HOST": default["HOST"], "BENCH_PG_PORT": str(default["PORT"]), "BENCH_PG_NAME": name}
    finally:
        with psycopg.connect(**server, dbname="postgres", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.contextmanager
def two_workers(tmp_path: Path, database: dict[str, str]) -> Iterator[tuple[int, int, LogWatch]]:
    """The model, then the site under `uvicorn --workers 2`: (port, the supervisor's pid, its log)."""
    args = SimpleNamespace(model_delay=0.3, chunk_delay=0.01)
    with model_server(args, tmp_path) as model:  # type: ignore[arg-type]
        env = {**site_environment(tmp_path), **database, "BENCH_MODEL_URL": model.url}
        port, log = free_port(), tmp_path / "server.log"
        with site_server("uvicorn", port, WORKERS, env, log) as site:
            yield port, site.pid, LogWatch(log)


def worker_processes(supervisor: int) -> list[int]:
    """uvicorn's worker processes (multiprocessing's spawned children, not its resource tracker)."""
    workers = []
    for pid in process_tree(supervisor):
        with contextlib.suppress(OSError):
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
            if b"spawn_main" in command and b"resource_tracker" not in command:
                workers.append(pid)
    return workers


def get_json(port: int, path: str) -> Any:
    auth = base64.b64encode(f"{USERNAME}:{PASSWORD}".encode()).decode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", headers={"Authorization": f"Basic {auth}"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)


def stored_messages(port: int, thread: str) -> list[dict[str, Any]]:
    """Every message of `thread`, through the API (all pages)."""
    messages, path = [], f"/api/memproc/threads/{thread}/messages/"
    while path:
        page = get_json(port, path)
        messages += page["results"]
        path = page["next"] and page["next"].split(f":{port}", 1)[1]
    return messages


def served_by_both(workers: list[int], before: dict[int, float]) -> bool:
    """Each process served turns: it used 50 ms of CPU or more since `before` (a turn costs ~15 ms;
    an idle worker ~0)."""
    return all(cpu_seconds(pid) - before[pid] >= 0.05 for pid in workers)


def test_two_workers_store_every_concurrent_turn_once(tmp_path: Path, database: dict[str, str]) -> None:
    with two_workers(tmp_path, database) as (port, supervisor, log):
        workers = worker_processes(supervisor)
        assert len(workers) == WORKERS, "uvicorn did not start two worker processes"
        client = Client(port, ENDPOINTS["memproc"], timeout=120.0)
        threads = [f"workers-{client.run_id}-{k}" for k in range(THREADS)]
        cpu_before = {pid: cpu_seconds(pid) for pid in workers}
        log.new_errors()
        # The kernel hands the connections to whichever process accepts first, and a process that
        # wakes accepts every pending one: a burst can go to one process alone (the other still
        # importing Django, say). So bursts go out until both have served, a few at most.
        thread_of: dict[str, str] = {}  # each turn's thread
        for burst in range(BURSTS):
            more = [f"b{burst}t{n}" for n in range(TURNS)]
            on = [threads[n % THREADS] for n in range(TURNS)]
            turns = asyncio.run(client.gather(more, on))
            thread_of.update(zip(more, on, strict=True))
            failed = [
                (name, turn.status, turn.error) for name, turn in zip(more, turns, strict=True) if not turn.ok
            ]
            assert not failed, failed[:5]
            assert log.new_errors() == {}
            if served_by_both(workers, cpu_before):
                break
        assert served_by_both(workers, cpu_before), f"a worker served none of {len(thread_of)} turns"

        stored = {thread: stored_messages(port, thread) for thread in threads}
    for name, thread in thread_of.items():
        prompt = PROMPT.format(n=name)
        mine = [m for m in stored[thread] if prompt in json.dumps(m)]
        assert sorted(m["role"] for m in mine) == ["assistant", "user"], (name, mine)
    assert sum(map(len, stored.values())) == 2 * len(thread_of)  # no other message anywhere in the set
