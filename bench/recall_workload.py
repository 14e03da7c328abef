"""Recall of memproc's PostgreSQL search on W2's own data and queries, against exact search.

    python bench/recall_workload.py                      # N = 10,000, ef_search 20 / 40 / 100
    python bench/recall_workload.py --n 50000 --ef 40 100
    BENCH_MEMPROC='{"HNSW_INDEX_TYPE": "halfvec"}' python bench/recall_workload.py

bench/recall_scale.py measures recall on synthetic clustered vectors at 1M; this measures it on the
workload the per-turn figures come from (../shared/bench/WORKLOADS.md): the W2 prefill of N messages
saved through `Memory.bulk_import()` (so the HNSW index is the one the product builds), then W2's
200 turn texts (`make_text("turn", j)`) as queries, searched in the resource scope through
`PgvectorStore(ef_search=...).search`, as the recall processor searches, at top_k 3 (W2's) and 10.

Exact answers come from NumPy over the vectors read back from the table. The workload's hash
embedder gives many equal distances (bag-of-words counts over a 256-word vocabulary), so a hit counts
as correct when its exact distance is no larger than the k-th exact distance (plus 1e-6): any of a
tie is a right answer. Prints one JSON line per (ef_search, top_k) on stdout and a table on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.run import memory_for, nearest_rank, prefill, setup_django  # noqa: E402

TIE = 1e-6


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=10000, help="W2 prefill size")
    parser.add_argument("--queries", type=int, default=200, help="W2 turn texts used as queries")
    parser.add_argument("--ef", type=int, nargs="+", default=[20, 40, 100], help="hnsw.ef_search values")
    parser.add_argument("--top-k", type=int, nargs="+", default=[3, 10])
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="memproc-recall-w2-"))
    # Other settings to compare (HNSW_INDEX_TYPE, HNSW_EF_CONSTRUCTION...) come in BENCH_MEMPROC.
    overrides = json.loads(os.environ.get("BENCH_MEMPROC") or "{}")
    os.environ["BENCH_MEMPROC"] = json.dumps({"RECORD_TURNS": False, **overrides})
    server = setup_django("postgres", tmp)
    try:
        results = run(args)
    finally:
        from django.db import connections

        connections.close_all()
        server.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)
    print_table(args, results)


def run(args: argparse.Namespace) -> list[dict]:
    from bench.workload import RESOURCE, make_text
    from memproc.embedders import get_embedder
    from memproc.vectors.pgvector_store import PgvectorStore

    memory = memory_for("W2")
    loaded = prefill("W2", args.n, memory, mode="bulk")
    embedder = get_embedder()
    ids, matrix = stored_vectors(embedder.id)
    if len(ids) != args.n:
        raise SystemExit(f"expected {args.n} stored vectors, found {len(ids)}")
    queries = np.asarray(
        embedder.embed([make_text("turn", j) for j in range(args.queries)]), dtype=np.float32
    )
    queries /= np.maximum(np.linalg.norm(queries, axis=1, keepdims=True), 1e-12)
    exact = 1.0 - queries @ matrix.T  # cosine distances, one row per query
    position = {message_id: i for i, message_id in enumerate(ids)}
    results = []
    for ef in args.ef:
        store = PgvectorStore(ef_search=ef)
        for top_k in args.top_k:
            kth = np.partition(exact, top_k - 1, axis=1)[:, top_k - 1]
            recalls, seconds = [], []
            for q, query in enumerate(queries):
                start = time.perf_counter()
                hits = store.search(embedder_id=embedder.id, vector=query, top_k=top_k, resource_id=RESOURCE)
                seconds.append(time.perf_counter() - start)
                right = sum(1 for hit in hits if exact[q, position[hit.message_id]] <= kth[q] + TIE)
                recalls.append(right / top_k)
            results.append(
                {
                    "bench": "recall_workload",
                    "workload": "W2",
                    "n": args.n,
                    "ef_search": ef,
                    "top_k": top_k,
                    "queries": len(recalls),
                    "recall": round(statistics.fmean(recalls), 4),
                    "queries_below_1": sum(1 for r in recalls if r < 1.0),
                    "worst": round(min(recalls), 3),
                    "search_p50_ms": round(nearest_rank(seconds, 0.5) * 1e3, 3),
                    "search_p95_ms": round(nearest_rank(seconds, 0.95) * 1e3, 3),
                    "prefill_s": loaded["prefill_s"],
                    "index_build_s": loaded["index_build_s"],
                }
            )
            print(json.dumps(results[-1]), flush=True)
    return results


def stored_vectors(embedder_id: str) -> tuple[list[str], np.ndarray]:
    """The embedder's stored rows, read back as the database holds them (float32, normalised)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT message_id, vector::text FROM memproc_messageembedding "
            "WHERE model = %s ORDER BY message_id",
            [embedder_id],
        )
        rows = cursor.fetchall()
    ids = [row[0] for row in rows]
    matrix = np.array([np.fromstring(row[1].strip("[]"), sep=",", dtype=np.float32) for row in rows])
    matrix /= np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12)
    return ids, matrix


def print_table(args: argparse.Namespace, results: list[dict]) -> None:
    lines = [
        f"W2 N={args.n}, {args.queries} queries, resource scope; recall against exact (ties count)",
        "",
        "| ef_search | top_k | recall | queries below 1 | worst | search p50 / p95 ms |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['ef_search']} | {r['top_k']} | {r['recall']:.4f} | {r['queries_below_1']} | {r['worst']} "
            f"| {r['search_p50_ms']} / {r['search_p95_ms']} |"
        )
    print("\n".join(lines), file=sys.stderr)


if __name__ == "__main__":
    main()
