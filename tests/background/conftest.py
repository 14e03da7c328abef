"""Fixtures for background work: committing agents, a recorder of Celery sends, Redis and a real worker.

Tests marked `redis` need a Redis broker at MEMPROC_TEST_REDIS_URL (default redis://127.0.0.1:6379/15,
a database number kept for tests); they are skipped, with the reason, when none answers (or, with
MEMPROC_REQUIRE_REDIS=1 as in CI, the run stops with that reason). Their worker
is a separate process that must share the test database: on PostgreSQL it connects to the embedded
server's test database; on SQLite the test database is made a file (an in-memory one is private to
its process) whenever such a test is about to run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from django.test import TestCase, override_settings

from memproc import Agent, Memory
from memproc.testing import ScriptedModel

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent.parent
REDIS_URL = os.environ.get("MEMPROC_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
WORKER_START_TIMEOUT = 20.0

_redis_state: dict[str, Any] = {}


def redis_unavailable_reason() -> str | None:
    """None when Redis answers PING at REDIS_URL, else why not (asked once per session)."""
    if "reason" not in _redis_state:
        try:
            import redis

            redis.Redis.from_url(REDIS_URL, socket_connect_timeout=0.5, socket_timeout=0.5).ping()
            _redis_state["reason"] = None
        except Exception as exc:  # not installed, refused, timed out, auth
            _redis_state["reason"] = (
                f"needs a Redis broker at {REDIS_URL} ({type(exc).__name__}: {exc}); start one with "
                "`redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save '' --appendonly no` "
                "or set MEMPROC_TEST_REDIS_URL"
            )
    return _redis_state["reason"]


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    ours = [item for item in items if "redis" in item.keywords and HERE in Path(str(item.path)).parents]
    if not ours:
        return
    reason = redis_unavailable_reason()
    if reason is not None and os.environ.get("MEMPROC_REQUIRE_REDIS"):
        raise pytest.UsageError(f"MEMPROC_REQUIRE_REDIS is set, and the Celery worker test {reason}")
    if reason is not None:
        for item in ours:
            item.add_marker(pytest.mark.skip(reason=reason))
        return
    _use_a_file_for_the_sqlite_test_database()


def _use_a_file_for_the_sqlite_test_database() -> None:
    from django.conf import settings

    database = settings.DATABASES["default"]  # the dict django.db.connections holds too
    if "sqlite3" not in database["ENGINE"]:
        return
    test = database.setdefault("TEST", {})
    if not test.get("NAME") or "memory" in str(test["NAME"]):
        test["NAME"] = str(Path(tempfile.mkdtemp(prefix="memproc-worker-db-")) / "test.sqlite3")


# --- agents and after-commit work ---------------------------------------------------------------------


@pytest.fixture
def model() -> ScriptedModel:
    return ScriptedModel()


class CommittingAgent(Agent):
    """Runs the turn's after-commit work as a real commit would (tests run in a transaction)."""

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        with TestCase.captureOnCommitCallbacks(execute=True):
            return super().generate(*args, **kwargs)


@pytest.fixture
def make_agent(model: ScriptedModel) -> Callable[..., Agent]:
    def build(**kwargs: Any) -> Agent:
        kwargs.setdefault("id", "bg-agent")
        kwargs.setdefault("instructions", "You are a test agent.")
        kwargs.setdefault("model", model)
        kwargs.setdefault("memory", Memory(last_messages=10, semantic_recall=True))
        return CommittingAgent(**kwargs)

    return build


@pytest.fixture
def registered() -> Iterator[Callable[[Agent], Agent]]:
    """Registers agents for the test (tasks look agents up by id) and unregisters them after."""
    from memproc.agents import register, unregister

    ids: list[str] = []

    def add(agent: Agent) -> Agent:
        ids.append(agent.id)
        return register(agent, replace=True)

    yield add
    for agent_id in ids:
        unregister(agent_id)


@dataclass
class SentTasks:
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def named(self, name: str) -> list[dict[str, Any]]:
        return [kwargs for task, kwargs in self.calls if task == name]


@pytest.fixture
def celery_sends(monkeypatch: pytest.MonkeyPatch) -> Iterator[SentTasks]:
    """BACKGROUND="celery", with the current Celery app's `send_task` recording instead of sending."""
    from celery import current_app

    sent = SentTasks()
    app = current_app._get_current_object()

    def send_task(name: str, args: Any = None, kwargs: Any = None, **options: Any) -> None:
        json.dumps(kwargs)  # what goes on the wire must serialise
        sent.calls.append((name, dict(kwargs or {})))

    monkeypatch.setattr(app, "send_task", send_task)
    with _memproc(BACKGROUND="celery"):
        yield sent


def _memproc(**values: Any) -> Any:
    from django.conf import settings

    return override_settings(MEMPROC={**settings.MEMPROC, **values})


@pytest.fixture
def memproc_settings() -> Callable[..., Any]:
    """`with memproc_settings(KEY=value):` overrides keys of MEMPROC, keeping the others."""
    return _memproc


# --- a real broker and worker ------------------------------------------------------------------------


@dataclass
class Broker:
    url: str
    queue: str
    app: Any

    def pending(self) -> int:
        import redis

        return int(redis.Redis.from_url(self.url).llen(self.queue))

    def purge(self) -> None:
        import redis

        client = redis.Redis.from_url(self.url)
        keys = list(client.scan_iter(match=f"*{self.queue}*"))
        if keys:
            client.delete(*keys)


@pytest.fixture
def broker() -> Iterator[Broker]:
    """A Celery app on the test Redis database with a queue of its own (so concurrent test runs on one
    Redis never take each other's tasks), made the current app for the test, purged before and after."""
    reason = redis_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    from celery import Celery, current_app

    queue = f"memproc-test-{uuid.uuid4().hex[:12]}"
    app = Celery("memproc-tests-sender", set_as_current=False)
    app.conf.update(
        broker_url=REDIS_URL,
        task_default_queue=queue,
        task_ignore_result=True,
        broker_connection_retry_on_startup=True,
    )
    previous = current_app._get_current_object()
    broker = Broker(url=REDIS_URL, queue=queue, app=app)
    broker.purge()
    app.set_current()
    try:
        yield broker
    finally:
        previous.set_current()
        broker.purge()
        app.close()


@dataclass
class Worker:
    process: subprocess.Popen
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        if self.alive():
            self.process.send_signal(signal.SIGTERM)  # warm shutdown: finishes the current task
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)


@pytest.fixture
def celery_worker(broker: Broker, transactional_db: None, tmp_path: Path) -> Iterator[Callable[[], Worker]]:
    """Starts (when called) `celery -A tests.background.celery_app worker --pool=solo` as a separate
    process on the test database, the test Redis and this test's queue; stops it before the database
    is flushed."""
    from django.db import connection

    started: list[Worker] = []

    def start() -> Worker:
        database = {
            key: connection.settings_dict.get(key)
            for key in ("ENGINE", "NAME", "USER", "PASSWORD", "HOST", "PORT", "OPTIONS")
        }
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.background.worker_settings",
            "MEMPROC_TEST_DATABASE": json.dumps(database, default=str),
            "MEMPROC_TEST_BROKER": broker.url,
            "MEMPROC_TEST_QUEUE": broker.queue,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
        }
        log_path = tmp_path / "worker.log"
        command = [
            sys.executable, "-m", "celery", "-A", "tests.background.celery_app", "worker",
            "--pool=solo", "--loglevel=INFO", "--queues", broker.queue,
            "--hostname", f"{broker.queue}@%h", "--without-gossip", "--without-mingle", "--without-heartbeat",
        ]  # fmt: skip
        with log_path.open("wb") as log:
            process = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        worker = Worker(process=process, log_path=log_path)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop()


@pytest.fixture
def wait_for() -> Callable[..., Any]:
    """`wait_for(condition, timeout=..., worker=..., what=...)`: see `_wait_for`."""
    return _wait_for


def _wait_for(
    condition: Callable[[], Any], *, timeout: float, worker: Worker | None = None, what: str = ""
) -> Any:
    """Polls `condition` until it is truthy (returned) or `timeout` passes (fails, with the worker's log)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if worker is not None and not worker.alive():
            pytest.fail(f"the Celery worker exited ({worker.process.returncode}):\n{worker.log()}")
        if time.monotonic() > deadline:
            log = worker.log() if worker is not None else ""
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what or condition}\n{log}")
        time.sleep(0.1)


@pytest.fixture(autouse=True)
def _fresh_embedding_caches() -> Iterator[None]:
    """Embedders are built once per process; tests that count embedder calls start with fresh ones."""
    from memproc.embedders import reset_embedders
    from tests.background.embedders import SwitchEmbedder

    reset_embedders()
    SwitchEmbedder.reset()
    yield
    reset_embedders()
    SwitchEmbedder.reset()
