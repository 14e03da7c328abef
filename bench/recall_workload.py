"""Recall of memproc's PostgreSQL search on W2's own data and queries, against exact search.

    python bench/recall_workload.py                      # N = 10,000, ef_search 20 / 40 / 100
    python bench/recall_workload.py --n 50000 --ef 100
    python bench/recall_workload.py --ef 100 --top-k 3 --index-types vector halfvec --blocks 6

bench/recall_scale.py measures recall on synthetic clustered vectors at 1M; this measures it on the
workload the per-turn figures come from (../shared/bench/WORKLOADS.md): the W2 prefill of N messages
saved through `Memory.bulk_import()` (so the HNSW index is the one the product builds), then W2's
200 turn texts (`make_text("turn", j)`) as queries, searched in the resource scope through
`PgvectorStore(ef_search=...).search`, as the recall processor searches, at top_k 3 (W2's) and 10.
With `--index-types vector halfvec` each type's index is built over the same rows (its build time and
size reported) and the types take turns, `--blocks` rounds of all queries each, so that the host's
drift does not favour one; latencies are over every round, recall over the queries.

Exact answers come from NumPy over the vectors read back from the table. The workload's hash
embedder gives many equal distances (bag-of-words counts over a 256-word vocabulary), so a hit counts
as correct when its exact distance is no larger than the k-th exact distance (plus 1e-6): any of a
tie is a right answer. Prints one JSON line per (ef_search, top_k) on stdout and a table on stderr.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

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
    parser.add_argument(
        "--index-types",
        nargs="+",
        choices=("vector", "halfvec"),
        help="HNSW index types to compare (each built over the same rows); default: HNSW_INDEX_TYPE",
    )
    parser.add_argument(
        "--blocks", type=int, default=1, help="rounds of all queries per type, the types taking turns"
    )
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
    from django.conf import settings as django_settings
    from django.test import override_settings

    from bench.workload import RESOURCE, make_text
    from memproc.conf import settings
    from memproc.embedders import get_embedder
    from memproc.vectors.pgvector_store import PgvectorStore

    memory = memory_for("W2")
    loaded = prefill("W2", args.n, memory, mode="bulk")
    embedder = get_embedder()
    ids, matrix = stored_vectors(embedder.id)
    if len(ids) != args.n:
        raise SystemExit(f"expected {args.n} stored vectors, found {len(ids)}")
    texts = [make_text("turn", j) for j in range(args.queries)]
    queries = np.asarray(embedder.embed(texts), dtype=np.float32)
    queries /= np.maximum(np.linalg.norm(queries, axis=1, keepdims=True), 1e-12)
    exact = 1.0 - queries @ matrix.T  # cosine distances, one row per query
    kth = {k: np.partition(exact, k - 1, axis=1)[:, k - 1] for k in args.top_k}
    position = {message_id: i for i, message_id in enumerate(ids)}
    kinds = args.index_types or [str(settings.HNSW_INDEX_TYPE)]

    def as_kind(kind: str) -> Any:
        return override_settings(MEMPROC={**django_settings.MEMPROC, "HNSW_INDEX_TYPE": kind})

    indexes = {}
    for kind in kinds:  # each built the same way, after the load, so their figures compare
        with as_kind(kind):
            indexes[kind] = build(embedder.id, int(matrix.shape[1]))
    samples: dict[tuple[str, int, int], tuple[list[float], list[float]]] = {}
    for block in range(args.blocks):  # the types take turns, so the host's drift hits each alike
        for kind in kinds if block % 2 == 0 else kinds[::-1]:
            with as_kind(kind):
                for ef, top_k in itertools.product(args.ef, args.top_k):
                    recalls, seconds = samples.setdefault((kind, ef, top_k), ([], []))
                    search = partial(
                        PgvectorStore(ef_search=ef).search,
                        embedder_id=embedder.id,
                        top_k=top_k,
                        resource_id=RESOURCE,
                    )
                    for q, query in enumerate(queries):
                        start = time.perf_counter()
                        hits = search(vector=query)
                        seconds.append(time.perf_counter() - start)
                        right = sum(
                            1 for h in hits if exact[q, position[h.message_id]] <= kth[top_k][q] + TIE
                        )
                        recalls.append(right / top_k)
    results = []
    for (kind, ef, top_k), (recalls, seconds) in samples.items():
        recalls = recalls[: len(queries)]  # every block gives the same answers: count each query once
        results.append(
            {
                "bench": "recall_workload",
                "workload": "W2",
                "n": args.n,
                "index_type": kind,
                "ef_search": ef,
                "top_k": top_k,
                "queries": len(recalls),
                "recall": round(statistics.fmean(recalls), 4),
                "queries_below_1": sum(1 for r in recalls if r < 1.0),
                "worst": round(min(recalls), 3),
                "searches": len(seconds),
                "search_p50_ms": round(nearest_rank(seconds, 0.5) * 1e3, 3),
                "search_p95_ms": round(nearest_rank(seconds, 0.95) * 1e3, 3),
                "search_mean_ms": round(statistics.fmean(seconds) * 1e3, 3),
                **indexes[kind],
                "prefill_s": loaded["prefill_s"],
            }
        )
        print(json.dumps(results[-1]), flush=True)
    return results


def build(embedder_id: str, dimensions: int) -> dict:
    """(Re)builds the embedder's index of the configured type as bulk_import does; its time and size."""
    from django.db import connection

    from memproc.vectors.pgvector_index import index_name
    from memproc.vectors.pgvector_store import PgvectorStore

    name = index_name(embedder_id, dimensions)
    with connection.cursor() as cursor:
        cursor.execute(f"DROP INDEX IF EXISTS {connection.ops.quote_name(name)}")
    start = time.perf_counter()
    PgvectorStore().build_index(embedder_id, dimensions, analyze=False)
    seconds = time.perf_counter() - start
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_relation_size(%s)", [name])
        size = cursor.fetchone()[0]
    return {"index_build_s": round(seconds, 3), "index_mb": round(size / 1e6, 1)}


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
        "| index | build s | MB | ef_search | top_k | recall | below 1 | worst | p50 / p95 / mean ms |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['index_type']} | {r['index_build_s']} | {r['index_mb']} | {r['ef_search']} | {r['top_k']} "
            f"| {r['recall']:.4f} | {r['queries_below_1']} | {r['worst']} "
            f"| {r['search_p50_ms']} / {r['search_p95_ms']} / {r['search_mean_ms']} |"
        )
    print("\n".join(lines), file=sys.stderr)


if __name__ == "__main__":
    main()
