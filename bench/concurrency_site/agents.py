"""The benchmark's agent (autodiscovered by memproc): the loopback OpenAI-compatible model.

The model is memproc's real OpenAI adapter, so a turn crosses a real socket to a model that answers
after a delay, as a provider does; the last 10 messages are its memory (no recall, no working
memory: the benchmark measures how turns overlap, not what memory costs, which bench/run.py does).
"""

import os

from memproc import Agent, Memory
from memproc.agents import register
from memproc.guardrails import MaxLength
from memproc.llm.openai import OpenAIChatModel

AGENT_ID = "bench"

# BENCH_STREAM_POLICY (bench/concurrency.py --stream-policy): an output guardrail that needs
# "sentences" and never trips (so each sentence costs its screening, nothing more), and that policy;
# "live" is allowed explicitly, to compare with the same guardrail.
POLICY = os.environ.get("BENCH_STREAM_POLICY") or None

register(
    Agent(
        id=AGENT_ID,
        name="Concurrency benchmark",
        instructions="You are a helpful assistant.",
        model=OpenAIChatModel("bench-model", base_url=os.environ["BENCH_MODEL_URL"], api_key="bench"),
        memory=Memory(last_messages=10),
        output_processors=[MaxLength(limit=100_000, on="output")] if POLICY else [],
        stream_policy=POLICY,  # type: ignore[arg-type]
        allow_unscreened_stream=POLICY == "live",
    ),
    replace=True,
)
