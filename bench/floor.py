"""The floor: a W1/W2/W3 turn's memory work written by hand with psycopg, one transaction per turn.

    python bench/floor.py --workload W2 --n 10000            # PostgreSQL only
    python bench/floor.py --workload W3 --updates --phase memory

What the least a turn's memory work can cost on this database is, measured the way bench/run.py
measures memproc, so bench/peer.py can print memproc's figures as multiples of it. The data is
memproc's: the run migrates a fresh database and prefills it with bench/run.py's `prefill`
(Memory.bulk_import, the same rows and HNSW index), creates the live thread through memproc, then
closes Django and drives its own psycopg 3 connection over the same tables.

A turn is one transaction, sent through psycopg's pipeline mode so that BEGIN rides with the first
read and COMMIT with the writes: 2 round trips a turn (W2: 3).

1. one SELECT (with BEGIN): the thread's last sequence (W3: its working memory and version) and its
   newest 10 messages (LEFT JOIN LATERAL, so an empty thread still answers);
2. W2 only, one SELECT: the 3 messages of the resource closest to the user message (scope
   "resource", none of the window's), over memproc's table: the HNSW branch ordered by the partial
   index's expression (`vector::halfvec(384)`, rows marked `indexed`, 4 rows fetched per wanted
   message as memproc does) joined with the exact scan of the unmarked tail that memproc's inserts
   leave, merged by distance; and, in the same statement, the 2 messages before and after each hit
   in its thread (message_range 2), none quarantined or excluded from recall, none in the window;
3. the writes and COMMIT in one go: one UPDATE of the thread (last sequence and updated_at by
   compare-and-swap on the sequence read in 1; W3 with updates also the working memory, by
   compare-and-swap on its version), one INSERT of the turn's two messages (user, then "OK."), W2:
   one INSERT of their two embeddings (unmarked, as memproc writes them).

The connection sets `hnsw.ef_search = 100` (memproc's HNSW_EF_SEARCH), `hnsw.iterative_scan =
relaxed_order` and no parallel workers once per session, outside the timing (memproc sends them with
every search, as SET LOCAL). Left out, as no workload turn needs them: memproc's turn record, its
working-memory revision (the lineage `Memory.forget` uses), the archived-threads check of recall, the
scope count that sends small scopes to an exact search, ON CONFLICT on the embeddings.

Timing: each turn is timed from its first statement to the return of COMMIT, by the same clock as
bench/run.py (`--clock`). Outside it, prepared before each turn: the texts, ids and timestamps, the
vectors (memproc.testing.HashEmbedder(384), the workload's embedder, so the same vectors as memproc
stores), their content hashes and pgvector literals, the JSON of the messages' content. memproc's
figure for the same turn (bench/run.py) includes its own embedder calls (the new user message; "OK."
comes from its process cache), its prompt building and the scripted model (agent phase), which the
floor has none of. `--phase memory` runs the same statements as the agent phase, with the memory
phase's texts ("mem" stream) and W3's update whenever `--updates` is given, as run.py's memory phase
updates on every iteration. `queries_per_turn` counts the statements sent, not BEGIN/COMMIT.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import run  # noqa: E402  (after the path: run as a script)

WINDOW = 10
TOP_K = 3
MESSAGE_RANGE = 2
CHUNK_OVERFETCH = 4  # memproc.vectors.pgvector_search: HNSW rows fetched per wanted message
DIMENSIONS = 384
SEP = "\x1f"  # memproc.models.THREAD_KEY_SEPARATOR: a row's key is "<resource>\x1f<public id>"

WINDOW_SQL = """
SELECT t.last_sequence, {memory} m.role, m.content, m.sequence, m.id
FROM memproc_thread t
LEFT JOIN LATERAL (
    SELECT id, role, content, sequence FROM memproc_message
    WHERE thread_id = t.id ORDER BY sequence DESC LIMIT {window}
) m ON true
WHERE t.id = %(thread)s
"""

SEARCH_SQL = f"""
WITH candidates AS (
    (SELECT message_id, thread_id, (vector::vector({DIMENSIONS})) <=> %(q)s::vector({DIMENSIONS}) AS distance
     FROM memproc_messageembedding
     WHERE model = %(model)s AND resource_id = %(resource)s AND dimensions = {DIMENSIONS} AND indexed
     ORDER BY (vector::halfvec({DIMENSIONS})) <=> %(q)s::halfvec({DIMENSIONS}) LIMIT %(fetch)s)
    UNION ALL
    (SELECT message_id, thread_id, (vector::vector({DIMENSIONS})) <=> %(q)s::vector({DIMENSIONS})
     FROM memproc_messageembedding
     WHERE model = %(model)s AND resource_id = %(resource)s AND dimensions = {DIMENSIONS} AND NOT indexed
     ORDER BY 3 LIMIT %(fetch)s)
), hits AS (
    SELECT message_id, MIN(distance) AS distance FROM candidates
    WHERE message_id <> ALL(%(present)s::varchar[])
    GROUP BY message_id ORDER BY 2, 1 LIMIT %(top_k)s
), anchors AS (
    SELECT m.thread_id, m.sequence FROM hits JOIN memproc_message m ON m.id = hits.message_id
    WHERE NOT m.recall_excluded
)
SELECT DISTINCT n.id, n.thread_id, n.role, n.content, n.sequence
FROM anchors a JOIN memproc_message n ON n.thread_id = a.thread_id
 AND n.sequence BETWEEN a.sequence - {MESSAGE_RANGE} AND a.sequence + {MESSAGE_RANGE}
WHERE NOT n.quarantined AND NOT n.recall_excluded AND n.id <> ALL(%(present)s::varchar[])
ORDER BY n.thread_id, n.sequence
"""

THREAD_SQL = (
    "UPDATE memproc_thread SET last_sequence = %(last)s + 2, updated_at = %(now)s{memory} "
    "WHERE id = %(thread)s AND last_sequence = %(last)s{expected}"
)

MESSAGES_SQL = (
    "INSERT INTO memproc_message (id, public_id, thread_id, resource_id, role, content, text, created_at, "
    "sequence, recall_excluded) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, false), "
    "(%s, %s, %s, %s, %s, %s, %s, %s, %s, false)"
)

EMBEDDINGS_SQL = (
    "INSERT INTO memproc_messageembedding (message_id, thread_id, resource_id, chunk, model, dimensions, "
    "content_hash, vector, created_at, indexed) VALUES "
    "(%s, %s, %s, 0, %s, %s, %s, %s::vector, %s, false), (%s, %s, %s, 0, %s, %s, %s, %s::vector, %s, false)"
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workload", choices=["W1", "W2", "W3"], required=True)
    parser.add_argument("--n", type=int, default=1000, help="prefill size (W1, W2)")
    parser.add_argument("--phase", choices=["agent", "memory"], default="agent")
    parser.add_argument("--updates", action="store_true", help="W3: each turn updates working memory")
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--clock", choices=["wall", "cpu"], default="wall")
    return parser.parse_args(argv)


@dataclass(frozen=True)
class TurnInput:
    """Everything a turn writes, prepared before its timing starts."""

    user_text: str
    user_vector: str  # pgvector literal
    user_hash: str
    rows: tuple[tuple[Any, ...], ...]  # (key, public id, role, content JSON, text, created_at) x 2
    memory: str | None  # W3 with updates: the new working memory


class Floor:
    """One workload's turns on one psycopg connection (Django's settings name the database)."""

    def __init__(self, conn: Any, *, workload: str, updates: bool, resource_id: str) -> None:
        from memproc.embedders import content_hash
        from memproc.testing import HashEmbedder

        self.conn = conn
        self.workload = workload
        self.updates = updates and workload == "W3"
        self.resource = resource_id
        self.embedder = HashEmbedder(dimensions=DIMENSIONS)
        self.ok_vector = literal(self.embedder.embed(["OK."])[0])
        self.ok_hash = content_hash("OK.", self.embedder.id)
        self.statements = 0
        memory = "t.working_memory, t.working_memory_version," if workload == "W3" else ""
        self.window_sql = WINDOW_SQL.format(memory=memory, window=WINDOW)
        self.thread_sql = THREAD_SQL.format(
            memory=", working_memory = %(memory)s, working_memory_version = %(version)s + 1"
            if self.updates
            else "",
            expected=" AND working_memory_version = %(version)s" if self.updates else "",
        )

    def prepare(self, text: str, *, memory: str) -> TurnInput:
        from memproc.embedders import content_hash

        now = datetime.now(UTC)
        rows = []
        for role, body in (("user", text), ("assistant", "OK.")):
            public = uuid.uuid4().hex
            content = json.dumps({"parts": [{"text": body, "type": "text"}]})
            rows.append((f"{self.resource}{SEP}{public}", public, role, content, body, now))
        return TurnInput(
            user_text=text,
            user_vector=literal(self.embedder.embed([text])[0]),
            user_hash=content_hash(text, self.embedder.id),
            rows=tuple(rows),
            memory=memory if self.updates else None,
        )

    def turn(self, thread_id: str, data: TurnInput) -> None:
        """One turn's reads and writes, committed, in 2 round trips (W2: 3): psycopg's pipeline sends
        BEGIN with the window's SELECT, and COMMIT with the writes. Raises if the thread moved since
        the window was read: the sequence swap then updates nothing, and the messages' INSERT breaks
        the unique (thread, sequence) index, so the transaction rolls back."""
        key = f"{self.resource}{SEP}{thread_id}"
        cur, update = self.conn.cursor(), self.conn.cursor()
        user, assistant = data.rows
        with self.conn.pipeline():
            cur.execute(self.window_sql, {"thread": key})
            window = cur.fetchall()
            last = window[0][0]
            version = window[0][2] if self.workload == "W3" else None
            present = [row[-1] for row in window if row[-1] is not None]
            if self.workload == "W2":
                cur.execute(SEARCH_SQL, self.search_params(data, present))
                cur.fetchall()
            update.execute(
                self.thread_sql,
                {"last": last, "now": user[5], "thread": key, "memory": data.memory, "version": version},
            )
            rows = [(user, "user", last + 1), (assistant, "assistant", last + 2)]
            cur.execute(
                MESSAGES_SQL,
                [
                    v
                    for row, role, seq in rows
                    for v in (row[0], row[1], key, self.resource, role, *row[3:6], seq)
                ],
            )
            if self.workload == "W2":
                vectors = [
                    (user, data.user_hash, data.user_vector),
                    (assistant, self.ok_hash, self.ok_vector),
                ]
                cur.execute(
                    EMBEDDINGS_SQL,
                    [
                        v
                        for row, digest, vector in vectors
                        for v in (
                            row[0],
                            thread_id,
                            self.resource,
                            self.embedder.id,
                            DIMENSIONS,
                            digest,
                            vector,
                            row[5],
                        )
                    ],
                )
            self.conn.commit()
        self.statements += 5 if self.workload == "W2" else 3
        if update.rowcount != 1:
            raise RuntimeError(f"thread {thread_id} changed during the turn")

    def search_params(self, data: TurnInput, present: list[str]) -> dict[str, Any]:
        return {
            "q": data.user_vector,
            "model": self.embedder.id,
            "resource": self.resource,
            "fetch": (TOP_K + len(present)) * CHUNK_OVERFETCH,
            "top_k": TOP_K,
            "present": present,
        }


def literal(vector: Any) -> str:
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"


def connect() -> Any:
    """A psycopg connection to Django's database, tuned once per session as the docstring says."""
    import psycopg
    from django.conf import settings

    from memproc.conf import settings as memproc_settings

    db = settings.DATABASES["default"]
    conn = psycopg.connect(host=db["HOST"], port=db["PORT"], user=db["USER"], dbname=db["NAME"])
    conn.execute(f"SET hnsw.ef_search = {int(memproc_settings.HNSW_EF_SEARCH)}")
    conn.execute("SET hnsw.iterative_scan = relaxed_order")
    conn.execute("SET max_parallel_workers_per_gather = 0")
    conn.commit()
    return conn


def measure(args: argparse.Namespace) -> dict[str, Any]:
    from bench.workload import MAIN_THREAD, RESOURCE, make_text, working_memory_doc
    from memproc.conf import settings as memproc_settings

    memory = run.memory_for(args.workload)
    stats: dict[str, Any] = {
        "side": "floor",
        "workload": args.workload,
        "n": args.n if args.workload != "W3" else 0,
        "db": "postgres",
        "phase": args.phase,
        "updates": args.updates,
        "cpu_ref_ms": run.cpu_reference_ms(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "hnsw_ef_search": memproc_settings.HNSW_EF_SEARCH,
    }
    if args.workload in ("W1", "W2"):
        stats["memproc_prefill_s"] = run.prefill(args.workload, args.n, memory)["prefill_s"]
    thread_id, warm_thread = MAIN_THREAD[args.workload], f"{args.workload.lower()}-warmup"
    for name in (thread_id, warm_thread):
        if not memory.get_thread(name, resource_id=RESOURCE):
            memory.create_thread(resource_id=RESOURCE, thread_id=name)
    from django.db import connections

    connections.close_all()
    conn = connect()
    try:
        floor = Floor(conn, workload=args.workload, updates=args.updates, resource_id=RESOURCE)
        stream = "turn" if args.phase == "agent" else "mem"
        for j in range(args.warmup):
            floor.turn(warm_thread, floor.prepare(make_text("warmup", j), memory=working_memory_doc(j)))
        # One unmeasured turn on the live thread, as bench/run.py does, with a text no measured turn writes.
        doc = working_memory_doc(args.turns)
        floor.turn(thread_id, floor.prepare(make_text("warmup", args.warmup), memory=doc))
        clock = time.thread_time if args.clock == "cpu" else time.perf_counter
        latencies, queries = [], []
        loop_start = time.perf_counter()
        for j in range(args.turns):
            data = floor.prepare(make_text(stream, j), memory=working_memory_doc(j))
            before, start = floor.statements, clock()
            floor.turn(thread_id, data)
            latencies.append((clock() - start) * 1000)
            queries.append(floor.statements - before)
        loop = time.perf_counter() - loop_start
        stats.update(stored(conn, RESOURCE, thread_id))
    finally:
        conn.close()
    stats.update(
        {
            "clock": args.clock,
            "turns": args.turns,
            "p50_ms": round(run.nearest_rank(latencies, 0.5), 3),
            "p95_ms": round(run.nearest_rank(latencies, 0.95), 3),
            "mean_ms": round(statistics.fmean(latencies), 3),
            "turns_per_s": round(args.turns / loop, 1),  # includes preparing each turn's input
            "queries_per_turn": round(statistics.fmean(queries), 2),
            "queries_min": min(queries),
            "queries_max": max(queries),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        }
    )
    return stats


def stored(conn: Any, resource_id: str, thread_id: str) -> dict[str, Any]:
    """What the live thread holds after the loop: its messages and their embeddings (checked by the
    smoke test, so the floor is seen to write what a turn writes)."""
    key = f"{resource_id}{SEP}{thread_id}"
    row = conn.execute(
        "SELECT (SELECT count(*) FROM memproc_message WHERE thread_id = %(k)s), "
        "(SELECT count(*) FROM memproc_messageembedding WHERE resource_id = %(r)s AND thread_id = %(t)s), "
        "(SELECT working_memory FROM memproc_thread WHERE id = %(k)s)",
        {"k": key, "r": resource_id, "t": thread_id},
    ).fetchone()
    conn.commit()
    return {"live_messages": row[0], "live_embeddings": row[1], "working_memory_chars": len(row[2])}


def run_once(args: argparse.Namespace) -> dict[str, Any]:
    """One run on a fresh database in a temp folder (an embedded PostgreSQL unless bench/peer.py
    points `run.start_postgres` at its shared server); the folder is removed whatever happens."""
    tmp = Path(tempfile.mkdtemp(prefix="memproc-floor-"))
    server = None
    try:
        os.environ["BENCH_BACKGROUND"] = "inline"
        server = run.setup_django("postgres", tmp)
        return measure(args)
    finally:
        from django.conf import settings

        if settings.configured:
            from django.db import connections

            connections.close_all()
        if server is not None:
            server.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    print(json.dumps(run_once(parse_args(argv))), flush=True)


if __name__ == "__main__":
    main()
