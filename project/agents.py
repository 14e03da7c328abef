"""The demo site's agents (autodiscovered by memproc at start-up).

Both use the offline `local/echo` model, so the demo runs with no key and no network; set
DEMO_MODEL (for example "openai/gpt-4o-mini" with OPENAI_API_KEY) to talk to a real model.
"""

from __future__ import annotations

import os

from memproc import Agent, Memory
from memproc.agents import register
from memproc.messages import Message
from memproc.processors import ProcessorContext, TokenLimiter


class BlockWord:
    """A tiny demo guardrail: blocks input that contains a forbidden word. Never edits the text."""

    id = "block-word"

    def __init__(self, *, word: str) -> None:
        self.word = word.lower()

    def process_input(self, ctx: ProcessorContext) -> list[Message] | None:
        for message in ctx.new_messages:
            if self.word in message.text.lower():
                ctx.abort(f"The word {self.word!r} is not allowed here", metadata={"word": self.word})
        return None


MODEL = os.environ.get("DEMO_MODEL", "local/echo")

register(
    Agent(
        id="assistant",
        name="Assistant with memory",
        description="Remembers the conversation, recalls related messages and keeps notes about you.",
        instructions="You are a friendly assistant. Use what you remember about the user.",
        model=MODEL,
        memory=Memory(
            last_messages=10, semantic_recall={"top_k": 3}, working_memory=True, generate_title=True
        ),
        input_processors=[TokenLimiter(8000)],
    ),
    replace=True,
)

register(
    Agent(
        id="guarded",
        name="Guarded assistant",
        description="Like the assistant, but a guardrail blocks any message with the word 'pineapple'.",
        instructions="You are a careful assistant.",
        model=MODEL,
        memory=Memory(last_messages=10, working_memory=True),
        input_processors=[BlockWord(word="pineapple")],
    ),
    replace=True,
)
