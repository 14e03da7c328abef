"""bench/concurrency.py at its smallest: uvicorn + SQLite, 1 then 3 concurrent streamed turns against a
loopback model that answers after 0.2 s. Checks the JSON it prints, never a latency: the real figures
need a quiet machine (bench/RESULTS.md)."""

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
}


def test_concurrency_py_smoke(tmp_path: Path) -> None:
    pytest.importorskip("uvicorn")
    pytest.importorskip("openai")
    args = ["--concurrency", "1,3", "--model-delay", "0.2", "--chunk-delay", "0.01", "--pause", "0"]
    levels = run_script(tmp_path, "bench/concurrency.py", *args, "--timeout", "30", timeout=90)
    assert [level["concurrency"] for level in levels] == [1, 3]
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
    assert not list(tmp_path.glob("memproc-concurrency-*")), "bench/concurrency.py left its temp folder"
