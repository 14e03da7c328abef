"""Runs the W1-W3 matrix (medians of 3 processes each) and writes bench/results.jsonl and a table.

python bench/matrix.py                 # the full matrix of WORKLOADS.md, both databases
python bench/matrix.py --quick         # N=1000 only, one run each (a smoke check)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

# (workload, N, db, phase, W3 updates, extra run.py arguments, extra environment)
FULL = [
    *[("W1", n, db, "agent", False, [], {}) for n in (1000, 10000) for db in ("sqlite", "postgres")],
    *[("W2", n, db, "agent", False, [], {}) for n in (1000, 10000) for db in ("sqlite", "postgres")],
    ("W2", 50000, "sqlite", "agent", False, [], {}),
    ("W2", 50000, "postgres", "agent", False, [], {}),
    *[("W3", 0, db, "agent", updates, [], {}) for updates in (False, True) for db in ("sqlite", "postgres")],
    *[("W1", 10000, db, "memory", False, [], {}) for db in ("sqlite", "postgres")],
    *[("W2", 10000, db, "memory", False, [], {}) for db in ("sqlite", "postgres")],
    *[("W3", 0, db, "memory", False, [], {}) for db in ("sqlite", "postgres")],
    # What the defaults are compared with: the HNSW index maintained row by row during the prefill,
    # embedding on a Celery worker (production), and pgvector's default ef_construction.
    ("W2", 10000, "postgres", "agent", False, ["--prefill", "rows"], {}),
    *[("W2", 10000, db, "agent", False, ["--background", "celery"], {}) for db in ("sqlite", "postgres")],
    ("W2", 10000, "postgres", "agent", False, [], {"BENCH_MEMPROC": '{"HNSW_EF_CONSTRUCTION": 64}'}),
]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", default=str(HERE / "results.jsonl"))
    args = parser.parse_args()
    configs = [c for c in FULL if c[1] in (0, 1000)] if args.quick else FULL
    repeat = 1 if args.quick else args.repeat
    rows = []
    with open(args.out, "w") as out:
        for workload, n, db, phase, updates, extra, env in configs:
            runs = 1 if n >= 50000 else repeat  # the 50k prefill alone takes minutes on PostgreSQL
            cmd = [
                sys.executable,
                str(HERE / "run.py"),
                "--workload",
                workload,
                "--n",
                str(n),
                "--db",
                db,
                "--phase",
                phase,
                "--repeat",
                str(runs),
            ]
            if updates:
                cmd.append("--updates")
            cmd += extra
            result = subprocess.run(
                cmd, capture_output=True, text=True, check=True, env={**os.environ, **env}
            )
            row = json.loads(result.stdout.strip().splitlines()[-1])
            rows.append(row)
            out.write(json.dumps(row) + "\n")
            out.flush()
            print(table_row(row), flush=True)
    print()
    print(table(rows))


HEADER = (
    "| workload | N | db | phase | variant | p50 ms | p95 ms | mean ms | turns/s | prefill msg/s "
    "(index build s) | model calls | SQL/turn (min–max) | peak RSS MB | cpu ref ms |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def table_row(r: dict) -> str:
    name = r["workload"] + (" +updates" if r.get("updates") else "")
    prefill = "–"
    if "prefill_msgs_per_s" in r:
        prefill = f"{r['prefill_msgs_per_s']:g} ({r['index_build_s']:g})"
    calls = r.get("model_calls_per_turn", "–")
    variant = [r.get("background", "inline")]
    if r.get("prefill") == "rows":
        variant.append("prefill row by row")
    if r["db"] == "postgres" and "ef_construction=128" not in r.get("hnsw", ""):
        variant.append(r.get("hnsw", ""))
    return (
        f"| {name} | {int(r['n']) or '–'} | {r['db']} | {r['phase']} | {', '.join(variant)} "
        f"| {r['p50_ms']:g} | {r['p95_ms']:g} | {r['mean_ms']:g} | {r['turns_per_s']:g} | {prefill} "
        f"| {calls} | {r['queries_per_turn']:g} ({int(r['queries_min'])}–{int(r['queries_max'])}) "
        f"| {r['peak_rss_mb']:g} | {r.get('cpu_ref_ms', '–')} |"
    )


def table(rows: list[dict]) -> str:
    return "\n".join([HEADER, *(table_row(r) for r in rows)])


if __name__ == "__main__":
    main()
