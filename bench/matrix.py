"""Runs the W1-W3 matrix (medians of 3 processes each) and writes bench/results.jsonl and a table.

python bench/matrix.py                 # the full matrix of WORKLOADS.md, both databases
python bench/matrix.py --quick         # N=1000 only, one run each (a smoke check)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

FULL = [
    *[("W1", n, db, "agent", False) for n in (1000, 10000) for db in ("sqlite", "postgres")],
    *[("W2", n, db, "agent", False) for n in (1000, 10000) for db in ("sqlite", "postgres")],
    ("W2", 50000, "sqlite", "agent", False),
    ("W2", 50000, "postgres", "agent", False),
    *[("W3", 0, db, "agent", updates) for updates in (False, True) for db in ("sqlite", "postgres")],
    *[("W1", 10000, db, "memory", False) for db in ("sqlite", "postgres")],
    *[("W2", 10000, db, "memory", False) for db in ("sqlite", "postgres")],
    *[("W3", 0, db, "memory", False) for db in ("sqlite", "postgres")],
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
        for workload, n, db, phase, updates in configs:
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
            result = subprocess.run(cmd, capture_output=True, text=True, check=True)
            row = json.loads(result.stdout.strip().splitlines()[-1])
            rows.append(row)
            out.write(json.dumps(row) + "\n")
            out.flush()
            print(table_row(row), flush=True)
    print()
    print(table(rows))


HEADER = (
    "| workload | N | db | phase | p50 ms | p95 ms | mean ms | turns/s | prefill msg/s | model calls "
    "| SQL/turn (min–max) | peak RSS MB |\n|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def table_row(r: dict) -> str:
    name = r["workload"] + (" +updates" if r.get("updates") else "")
    prefill = r.get("prefill_msgs_per_s", "–")
    calls = r.get("model_calls_per_turn", "–")
    return (
        f"| {name} | {r['n'] or '–'} | {r['db']} | {r['phase']} | {r['p50_ms']} | {r['p95_ms']} | "
        f"{r['mean_ms']} | {r['turns_per_s']} | {prefill} | {calls} | {r['queries_per_turn']} "
        f"({r['queries_min']}–{r['queries_max']}) | {r['peak_rss_mb']} |"
    )


def table(rows: list[dict]) -> str:
    return "\n".join([HEADER, *(table_row(r) for r in rows)])


if __name__ == "__main__":
    main()
