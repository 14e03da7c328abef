"""bench/concurrency.py --stream-policy at its smallest: the agent with an output guardrail that needs
"sentences", under each policy. Checks the JSON and the order of events it implies (under "hold" the
first delta comes with the last), never a latency: the figures are in bench/RESULTS.md."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bench.test_bench_smoke import run_script


@pytest.mark.parametrize("policy", ["sentences", "hold"])
def test_concurrency_py_runs_with_a_stream_policy(tmp_path: Path, policy: str) -> None:
    pytest.importorskip("uvicorn")
    pytest.importorskip("openai")
    args = [
        "--endpoint",
        "memproc",
        "--concurrency",
        "2",
        "--model-delay",
        "0.2",
        "--chunk-delay",
        "0.01",
        "--pause",
        "0",
    ]
    (level,) = run_script(
        tmp_path, "bench/concurrency.py", *args, "--stream-policy", policy, "--timeout", "30", timeout=90
    )
    assert level["stream_policy"] == policy
    assert level["errors"] == 0 and level["ok"] == 2 and level["server_errors"] == {}
    assert level["deltas_per_turn"] == 9  # "Echo: Concurrent turn N. It asks for one reply"
    if policy == "hold":
        assert level["delta_span_p50_s"] < 0.05  # released together, after the model's last word
    else:
        assert level["delta_span_p50_s"] >= 0.01  # the second sentence came later than the first
