"""Two checkouts' bench/run.py at the same time, each on a core of its own: a before/after of one
workload that the host's drift cannot bias.

    git worktree add /tmp/before 150c76d
    python bench/paired.py --workload W1 --base /tmp/before               # 8 rounds, N=1000
    python bench/paired.py --workload W2 --base /tmp/before --rounds 12 --turns 2000

On these shared 2-vCPU hosts the same code's p50 moves by 10-30% within an hour (`cpu_ref_ms` in
RESULTS.md), so runs of two commits one after the other compare the host as much as the code: a
5% difference needs many interleaved rounds and still flips sign between sittings. Here each round
starts this checkout's run and the base's together, pins each process to its own core
(`sched_setaffinity`), and swaps the cores every round, so both meet the same neighbours, the same
memory bandwidth and the same caches at the same moment. Each run is bench/run.py of its own
checkout (its own memproc, its own fresh database), with the same arguments and turn records off
(`RECORD_TURNS`; pass --record-turns to keep them).

With `--clock cpu` each turn is timed by its thread's CPU time instead of the wall clock: what the
turn's own work costs, without the time the host kept the process off its core (the base's run.py
must know the option: a worktree older than it needs the same few lines of bench/run.py).

Prints one JSON line per round (both runs' p50/mean/queries) and a summary: the median ratio
this/base of p50 and of mean (below 1: this checkout is faster) and in how many rounds this
checkout's p50 was lower. Needs two CPUs. A round takes a few seconds at the default size.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workload", choices=["W1", "W2", "W3"], required=True)
    parser.add_argument("--base", type=Path, required=True, help="the other checkout (a git worktree)")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--n", type=int, default=1000, help="prefill size (W1, W2)")
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--record-turns", action="store_true", help="keep turn records on in both")
    parser.add_argument(
        "--clock",
        choices=["wall", "cpu"],
        default="wall",
        help="bench/run.py's --clock: cpu times each turn by its thread's CPU time (the base checkout's "
        "run.py must know the option)",
    )
    args = parser.parse_args(argv)
    if not (args.base / "bench" / "run.py").is_file():
        parser.error(f"--base {args.base} has no bench/run.py: pass a checkout of this repository")
    if args.rounds < 1 or args.turns < 1:
        parser.error("--rounds and --turns must be at least 1")
    if len(os.sched_getaffinity(0)) < 2:
        parser.error("needs two CPUs: one for each checkout's run")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    cores = sorted(os.sched_getaffinity(0))[:2]
    rounds: list[dict[str, Any]] = []
    for number in range(args.rounds):
        here_core, base_core = cores if number % 2 == 0 else cores[::-1]
        with tempfile.TemporaryDirectory(prefix="memproc-paired-") as tmp:
            here = start(ROOT, here_core, args, Path(tmp) / "this")
            base = start(args.base, base_core, args, Path(tmp) / "base")
            row = {"round": number + 1, "this": finish(here), "base": finish(base)}
        rounds.append(row)
        print(json.dumps(row), flush=True)
    print(json.dumps(summary(rounds, args)), flush=True)


@dataclass
class Run:
    root: Path
    core: int
    out: Path
    process: subprocess.Popen[bytes]


def start(root: Path, core: int, args: argparse.Namespace, out: Path) -> Run:
    """Starts bench/run.py of `root` and pins it to `core` (before its interpreter has started any
    thread of its own); its output goes to files, so neither run waits on a full pipe."""
    env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "PYTHONPATH")}
    memproc = json.loads(env.get("BENCH_MEMPROC") or "{}")
    env["BENCH_MEMPROC"] = json.dumps({"RECORD_TURNS": args.record_turns, **memproc})
    command = [sys.executable, "bench/run.py", "--workload", args.workload, "--n", str(args.n)]
    command += ["--turns", str(args.turns)]
    if args.clock != "wall":
        command += ["--clock", args.clock]
    out.mkdir()
    with (out / "stdout").open("wb") as stdout, (out / "stderr").open("wb") as stderr:
        process = subprocess.Popen(command, cwd=root, env=env, stdout=stdout, stderr=stderr)
    os.sched_setaffinity(process.pid, {core})
    return Run(root, core, out, process)


def finish(run: Run) -> dict[str, Any]:
    """The run's statistics, trimmed to what is compared."""
    if run.process.wait() != 0:
        stderr = (run.out / "stderr").read_text(errors="replace")
        raise SystemExit(f"bench/run.py in {run.root} failed:\n{stderr[-3000:]}")
    stats = json.loads((run.out / "stdout").read_text().strip().splitlines()[-1])
    keys = ("p50_ms", "p95_ms", "mean_ms", "queries_per_turn", "cpu_ref_ms")
    return {"root": str(run.root), "core": run.core, **{k: stats[k] for k in keys}}


def summary(rounds: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    def ratio(key: str) -> float:
        return round(statistics.median(r["this"][key] / r["base"][key] for r in rounds), 3)

    def median(side: str, key: str) -> float:
        return round(statistics.median(r[side][key] for r in rounds), 3)

    return {
        "bench": "paired",
        "workload": args.workload,
        "n": args.n,
        "turns": args.turns,
        "clock": args.clock,
        "rounds": len(rounds),
        "this_p50_ms": median("this", "p50_ms"),
        "base_p50_ms": median("base", "p50_ms"),
        "p50_ratio": ratio("p50_ms"),
        "mean_ratio": ratio("mean_ms"),
        "this_faster_rounds": sum(r["this"]["p50_ms"] < r["base"]["p50_ms"] for r in rounds),
        "this_queries": rounds[0]["this"]["queries_per_turn"],
        "base_queries": rounds[0]["base"]["queries_per_turn"],
        "base": str(args.base),
    }


if __name__ == "__main__":
    main()
