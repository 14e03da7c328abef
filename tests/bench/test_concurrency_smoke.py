"""bench/concurrency.py at its smallest: uvicorn + SQLite with one worker process, then two, 1 then 3
concurrent streamed turns to memproc and to the bare endpoint in turn, against a loopback model that
answers after 0.2 s. Checks the JSON it prints, never a latency: the real figures need a quiet machine
(bench/RESULTS.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bench.test_bench_smoke import run_script

LEVEL_KEYS = {
    "server",
    "db",
    "concurrency",
    "turns",
    "ok",
    "errors",
    "wall_s",
    "turns_per_s",
    "first_delta_p50_s",
    "first_delta_p95_s",
    "total_p50_s",
    "total_p95_s",
    "delta_span_p50_s",
    "peak_rss_mb",
    "server_cpu_s",
    "server_errors",
    "endpoint",
    "workers",
}
RATIO_KEYS = {
    "workers",
    "concurrency",
    "first_delta_p50_ratio",
    "first_delta_p95_ratio",
    "wall_ratio",
    "order",
}


def test_concurrency_py_smoke(tmp_path: Path) -> None:
    pytest.importorskip("uvicorn")
    pytest.importorskip("openai")
    args = ["--concurrency", "1,3", "--workers", "1,2", "--model-delay", "0.2", "--chunk-delay", "0.01"]
    lines = run_script(
        tmp_path, "bench/concurrency.py", *args, "--pause", "0", "--timeout", "30", timeout=150
    )
    levels = [line for line in lines if line["bench"] == "concurrency"]
    ratios = [line for line in lines if line["bench"] == "concurrency-ratio"]
    # Per worker count and level: both endpoints, one after the other, the order swapped at each level.
    assert [(r["workers"], r["concurrency"], r["order"]) for r in ratios] == [
        (1, 1, ["memproc", "baseline"]),
        (1, 3, ["baseline", "memproc"]),
        (2, 1, ["memproc", "baseline"]),
        (2, 3, ["baseline", "memproc"]),
    ]
    assert [(lv["workers"], lv["concurrency"], lv["endpoint"]) for lv in levels] == [
        (r["workers"], r["concurrency"], name) for r in ratios for name in r["order"]
    ]
    for level in levels:
        assert LEVEL_KEYS <= level.keys()
        assert (level["server"], level["db"]) == ("uvicorn", "sqlite")
        assert level["errors"] == 0 and level["ok"] == level["turns"] == level["concurrency"], level
        assert level["server_errors"] == {}
        # Every turn streamed the model's 8 words as separate frames, then its finish.
        assert level["deltas_per_turn"] == 8
        # ...as the model sent them, 10 ms apart (--chunk-delay): a lower bound, never a latency.
        assert level["delta_span_p50_s"] >= 0.05
        assert 0.2 <= level["first_delta_p50_s"] <= level["first_delta_p95_s"] <= level["total_p95_s"]
        assert level["peak_rss_mb"] > 0
    pairs = {(lv["workers"], lv["concurrency"], lv["endpoint"]): lv for lv in levels}
    for ratio in ratios:
        assert RATIO_KEYS <= ratio.keys()
        mine, bare = (
            pairs[(ratio["workers"], ratio["concurrency"], name)] for name in ("memproc", "baseline")
        )
        assert ratio["wall_ratio"] == round(mine["wall_s"] / bare["wall_s"], 3)
        assert ratio["first_delta_p95_ratio"] == round(
            mine["first_delta_p95_s"] / bare["first_delta_p95_s"], 3
        )
    # Two workers: the server's figures count the supervisor's worker processes (twice the memory).
    one, two = (max(lv["peak_rss_mb"] for lv in levels if lv["workers"] == n) for n in (1, 2))
    assert two > one
    assert not list(tmp_path.glob("memproc-concurrency-*")), "bench/concurrency.py left its temp folder"
