"""The W1-W3 workload of ../shared/bench/WORKLOADS.md: texts, ids and the scripted model.

`make_text` is a port of the normative generator (workload_ref.py); `check_port()` compares it with
reference.json when the shared folder is there. The embedder is `memproc.testing.HashEmbedder(384)`,
which produces the reference embedder's vectors (tests/embedders checks that).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from memproc.llm.types import ModelRequest, ModelResponse, ToolCall

M = 0xFFFFFFFF
SYL = ["ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "xe", "zu", "ba", "do", "fi", "go", "hu", "je"]
VOCAB = [SYL[k >> 4] + SYL[k & 15] for k in range(256)]
STREAMS = {
    "prefill": ("msg", 0x5EED0001),
    "turn": ("turn", 0x5EED0002),
    "warmup": ("warm", 0x5EED0003),
    "mem": ("mem", 0x5EED0004),
}
RESOURCE = "bench-resource"
MAIN_THREAD = {"W1": "w1-main", "W2": "w2-live", "W3": "w3-main"}
EPOCH = datetime(2024, 1, 1, tzinfo=UTC)
SHARED = Path(__file__).resolve().parents[2] / "shared" / "bench"


def mulberry32(a: int):
    a &= M

    def nxt() -> int:
        nonlocal a
        a = (a + 0x6D2B79F5) & M
        t = ((a ^ (a >> 15)) * (1 | a)) & M
        t = ((t + (((t ^ (t >> 7)) * (61 | t)) & M)) & M) ^ t
        return (t ^ (t >> 14)) & M

    return nxt


def make_text(stream: str, i: int) -> str:
    label, seed = STREAMS[stream]
    r = mulberry32((seed + i * 0x9E3779B1) & M)
    n = 8 + r() % 25
    return f"{label} {i}: " + " ".join(VOCAB[r() % 256] for _ in range(n))


def prefill_thread(workload: str, i: int, n: int) -> str:
    return "w1-main" if workload == "W1" else f"w2-t{i * 20 // n:02d}"


def prefill_created_at(i: int) -> datetime:
    return EPOCH + timedelta(seconds=i)


def working_memory_doc(j: int) -> str:
    interests = ", ".join(make_text("turn", j).split(": ", 1)[1].split()[:4])
    return (
        "# User Information\n- **First Name**: Bench\n- **Last Name**: User\n- **Location**: Testville\n"
        f"- **Occupation**: benchmark\n- **Interests**: {interests}\n- **Goals**: \n- **Events**: turn {j}\n"
        "- **Facts**: \n- **Projects**:"
    )


class InstantModel:
    """Answers "OK." at once. With `update_working_memory`, a turn first calls updateWorkingMemory."""

    id = "bench/instant"

    def __init__(self, *, update_working_memory: bool = False) -> None:
        self.update_working_memory = update_working_memory
        self.calls = 0
        self.turn = 0

    def generate(self, request: ModelRequest) -> ModelResponse:
        self.calls += 1
        last = request.messages[-1]
        if self.update_working_memory and last.role != "tool":
            doc = working_memory_doc(self.turn)
            return ModelResponse(
                tool_calls=[ToolCall(f"wm-{self.turn}", "updateWorkingMemory", {"memory": doc})]
            )
        return ModelResponse(text="OK.")


def check_port() -> bool | None:
    """True when the port matches reference.json; None when the shared folder is not here."""
    path = SHARED / "reference.json"
    if not path.exists():
        return None
    ref = json.loads(path.read_text())
    r = mulberry32(42)
    assert [r() for _ in range(5)] == ref["mulberry32_seed42_first5"]
    for key, value in ref["text"].items():
        stream, i = key.rsplit("_", 1)
        assert make_text(stream, int(i)) == value, key
    return True
