"""The benchmark's agent (autodiscovered by memproc): the loopback OpenAI-compatible model.

The model is memproc's real OpenAI adapter, so a turn crosses a real socket to a model that answers
after a delay, as a provider does; the last 10 messages are its memory (no recall, no working
memory: the benchmark measures how turns overlap, not what memory costs, which bench/run.py does).
"""

import os

from memproc import Agent, Memory
from memproc.agents import register
from memproc.llm.openai import OpenAIChatModel

AGENT_ID = "bench"

register(
    Agent(
        id=AGENT_ID,
        name="Concurrency benchmark",
        instructions="You are a helpful assistant.",
        model=OpenAIChatModel("bench-model", base_url=os.environ["BENCH_MODEL_URL"], api_key="bench"),
        memory=Memory(last_messages=10),
    ),
    replace=True,
)
