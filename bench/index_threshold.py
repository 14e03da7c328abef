"""Where an HNSW index starts to pay: exact search against HNSW search over a whole embedder, by size.

    python bench/index_threshold.py                          # 2k..100k vectors, ~10 min on 2 cores
    python bench/index_threshold.py --sizes 5000,20000 --queries 20

For each size, runs `bench/recall_scale.py` (its own embedded PostgreSQL, clustered 384-d vectors)
and reads two of its rows for the whole-table scope: the searches made before the index exists
(the store's exact branch: what a site gets below HNSW_BUILD_MIN_ROWS) and those made through the
index the background job built (HNSW, `--ef` candidates). Prints JSON lines on stdout and a table on
stderr: p50 and p95 latency of each, the exact/HNSW ratio, HNSW's recall@10 and the build time.
The HNSW_BUILD_MIN_ROWS default is the size from which exact search is clearly slower than HNSW
(docs: Scaling, "When the index is built").
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="2000,5000,10000,20000,50000,100000", help="vectors per run")
    parser.add_argument("--dims", type=int, default=384)
    parser.add_argument("--queries", type=int, default=40, help="queries per phase")
    parser.add_argument("--ef", type=int, default=100, help="hnsw.ef_search (HNSW_EF_SEARCH's default)")
    parser.add_argument("--timeout", type=int, default=1200, help="seconds per size")
    return parser.parse_args(argv)


def measure(n: int, args: argparse.Namespace) -> dict:
    command = [
        sys.executable,
        str(ROOT / "bench" / "recall_scale.py"),
        *("--n", str(n), "--dims", str(args.dims), "--queries", str(args.queries)),
        *("--ef", str(args.ef), "--warmup", "5", "--sql-check", "1", "--alt-exact-max-rows", "0"),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout, check=False)
    if done.returncode != 0:
        raise SystemExit(f"recall_scale.py --n {n} failed:\n{done.stderr[-3000:]}")
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    setup = next(row for row in rows if row["kind"] == "setup")
    whole = {row["phase"]: row for row in rows if row["kind"] == "search" and row["scope"] == "all"}
    exact, hnsw = whole["before"], whole["after"]
    return {
        "bench": "index_threshold",
        "n": n,
        "dims": args.dims,
        "exact_p50_ms": exact["p50_ms"],
        "exact_p95_ms": exact["p95_ms"],
        "exact_path": exact["path"],
        "hnsw_p50_ms": hnsw["p50_ms"],
        "hnsw_p95_ms": hnsw["p95_ms"],
        "hnsw_path": hnsw["path"],
        "hnsw_recall_at_10": hnsw["recall_at_10"],
        "exact_over_hnsw_p50": round(exact["p50_ms"] / hnsw["p50_ms"], 2) if hnsw["p50_ms"] else None,
        "index_build_s": setup["index_build_s"],
        "index_mb": setup["index_mb"],
        "load_avg": setup["machine"]["load_avg"],
    }


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    results = []
    for n in [int(size) for size in args.sizes.split(",") if size.strip()]:
        row = measure(n, args)
        results.append(row)
        print(json.dumps(row), flush=True)
        print(
            f"[index_threshold] n={n}: exact p50 {row['exact_p50_ms']} ms, HNSW p50 {row['hnsw_p50_ms']} ms",
            file=sys.stderr,
            flush=True,
        )
    header = ("rows", "exact p50", "exact p95", "hnsw p50", "hnsw p95", "exact/hnsw", "recall@10", "build s")
    print("\n{:>8} {:>10} {:>10} {:>9} {:>9} {:>10} {:>9} {:>8}".format(*header), file=sys.stderr)
    for r in results:
        print(
            "{:>8,} {:>10.2f} {:>10.2f} {:>9.2f} {:>9.2f} {:>10} {:>9.3f} {:>8.2f}".format(
                r["n"],
                r["exact_p50_ms"],
                r["exact_p95_ms"],
                r["hnsw_p50_ms"],
                r["hnsw_p95_ms"],
                r["exact_over_hnsw_p50"],
                r["hnsw_recall_at_10"],
                r["index_build_s"],
            ),
            file=sys.stderr,
        )


if __name__ == "__main__":
    main()
