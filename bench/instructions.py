"""CPU instructions per turn (W1-W3, SQLite, agent phase), counted by valgrind's callgrind.

Wall-clock p50s on these shared 2-vCPU hosts move by 10-30% between runs of the same code (see
`cpu_ref_ms` in every row of RESULTS.md), more than most changes to a turn's cost. An instruction
count does not depend on what else the host is doing, so it compares commits run hours apart:

    python bench/instructions.py --workload W1                  # this checkout
    python bench/instructions.py --workload W1 --root /tmp/old  # another checkout (git worktree add)

Each measurement runs the same loop twice under callgrind, with `--low` and `--high` measured turns
after the same prefill and warm-up, and divides the difference of the two totals by the difference
of the turn counts: start-up, imports and the prefill cancel out. The loop is bench/run.py's (its
`setup_django`, `memory_for`, `prefill` and `bench_agent`, from the measured checkout), turn records
off, OpenBLAS on one thread (its idle threads spin), hash seed fixed. Counts are instructions, not
time: a change that moves work into memory stalls or the kernel (SQLite's WAL writes are
`pwrite` calls) does not show here, so the wall-clock runs of bench/run.py stay the measure the
targets are stated in. Needs valgrind (a Debian package); a run takes 1-3 minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WARMUP = 50


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", choices=["W1", "W2", "W3"], default="W1")
    parser.add_argument("--n", type=int, default=1000, help="prefill size (W1, W2)")
    parser.add_argument("--low", type=int, default=100, help="measured turns of the first run")
    parser.add_argument("--high", type=int, default=400, help="measured turns of the second run")
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout to measure")
    parser.add_argument("--inner", type=int, help=argparse.SUPPRESS)  # the loop itself, under valgrind
    args = parser.parse_args(argv)
    if args.inner is not None:
        run_loop(args.workload, args.n, args.inner)
        return
    if args.high <= args.low:
        parser.error("--high must be larger than --low")
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    totals = {turns: instructions(args, turns) for turns in (args.low, args.high)}
    per_turn = (totals[args.high] - totals[args.low]) / (args.high - args.low)
    print(
        json.dumps(
            {
                "bench": "instructions",
                "workload": args.workload,
                "n": args.n if args.workload != "W3" else 0,
                "instructions_per_turn": round(per_turn),
                "turns": [args.low, args.high],
                "root": str(args.root),
                "commit": commit(args.root),
            }
        )
    )


def instructions(args: argparse.Namespace, turns: int) -> int:
    """callgrind's total for one run of the loop with `turns` measured turns."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        env = {**os.environ, "PYTHONHASHSEED": "0", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
        command = [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={out}",
            sys.executable,
            str(Path(__file__).resolve()),
            "--workload",
            args.workload,
            "--n",
            str(args.n),
            "--root",
            str(args.root.resolve()),
            "--inner",
            str(turns),
        ]
        done = subprocess.run(command, cwd=args.root, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"the loop failed under valgrind:\n{done.stderr[-3000:]}")
        match = re.search(r"^summary: (\d+)", out.read_text(), re.MULTILINE)
        if match is None:
            raise SystemExit(f"no summary line in {out}")
        return int(match.group(1))


def run_loop(workload: str, n: int, turns: int) -> None:
    """The measured loop, from the checkout in the working directory (bench/run.py's helpers)."""
    sys.path.insert(0, os.getcwd())
    os.environ["BENCH_MEMPROC"] = json.dumps({"RECORD_TURNS": False})
    import bench.run as runner

    with tempfile.TemporaryDirectory() as tmp:
        runner.setup_django("sqlite", Path(tmp))
        from bench.workload import MAIN_THREAD, RESOURCE, InstantModel, make_text

        memory = runner.memory_for(workload)
        if workload in ("W1", "W2"):
            runner.prefill(workload, n, memory, mode="bulk")
        model = InstantModel(update_working_memory=False)
        agent = runner.bench_agent(workload, model, memory)
        thread_id = MAIN_THREAD[workload]
        for j in range(WARMUP):
            agent.generate(make_text("warmup", j), thread_id=thread_id, resource_id=RESOURCE)
        for j in range(turns):
            model.turn = j
            agent.generate(make_text("turn", j), thread_id=thread_id, resource_id=RESOURCE)


def commit(root: Path) -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


if __name__ == "__main__":
    main()
