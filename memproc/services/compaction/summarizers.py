"""What writes a fold's new summary text: a chat model (`ModelSummarizer`), or the offline extractive
summarizer (`memproc.processors.compaction.ExtractiveSummarizer`); `summarizer_for` picks one."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Protocol

from asgiref.sync import async_to_sync

from memproc.llm import resolve_model
from memproc.llm.types import ModelRequest
from memproc.messages import Message, thaw
from memproc.messages.prompt_tags import neutralise
from memproc.processors.compaction import EXTRACTIVE, OFFLINE_MODELS, ExtractiveSummarizer
from memproc.processors.token_limiter import truncate_to_tokens
from memproc.processors.tokens import TokenCounter

__all__ = ["ModelSummarizer", "Summarizer", "summarizer_for"]

logger = logging.getLogger("memproc.services.compaction")  # the name it had before the split


class Summarizer(Protocol):
    id: str

    def summarize(
        self, *, previous: str, messages: Sequence[Message], budget: int, counter: TokenCounter
    ) -> str: ...


SUMMARY_INSTRUCTIONS = """You keep the running summary of a long conversation between a user and an \
assistant. You get the current summary and the messages that came after it. Write the new summary: \
merge what is new into it; keep every fact the user stated about themselves, their preferences, \
decisions, names, numbers, dates and open tasks; drop greetings and small talk. Write short \
Markdown bullet points, at most {budget} tokens. Answer with the summary alone."""

MAX_TRANSCRIPT_WORDS = 300  # per message: a tool result can be a whole document


class ModelSummarizer:
    """Summarizes with a chat model (the agent's, or the one `compaction={"model": ...}` names). An
    answer over the budget is cut to it; an empty answer falls back to the extractive summarizer."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.id = str(getattr(model, "id", "") or type(model).__name__)

    def summarize(
        self, *, previous: str, messages: Sequence[Message], budget: int, counter: TokenCounter
    ) -> str:
        request = ModelRequest(
            messages=[
                Message.create("system", SUMMARY_INSTRUCTIONS.format(budget=budget)),
                Message.create("user", _transcript(previous, messages)),
            ],
            tools=[],
        )
        if hasattr(self.model, "generate"):
            response = self.model.generate(request)
        else:
            response = async_to_sync(self.model.agenerate)(request)
        text = (response.text or "").strip()
        if not text:
            logger.warning("memproc: summarizer %s answered nothing; the fold is extractive", self.id)
            return ExtractiveSummarizer().summarize(
                previous=previous, messages=messages, budget=budget, counter=counter
            )
        return truncate_to_tokens(counter, text, budget)


def _transcript(previous: str, messages: Sequence[Message]) -> str:
    lines = []
    for message in messages:
        pieces = [message.text] if message.text.strip() else []
        pieces += [f"[calls {c.tool_name} {thaw(c.args)!r}]" for c in message.tool_calls]
        pieces += [f"[{r.tool_name} returned {thaw(r.result)!r}]" for r in message.tool_results]
        words = " ".join(pieces).split()
        if words:
            clipped = " ".join(words[:MAX_TRANSCRIPT_WORDS]) + (
                " …" if len(words) > MAX_TRANSCRIPT_WORDS else ""
            )
            lines.append(f"{message.role}: {clipped}")
    body = "\n".join(lines)
    return (
        f"<current_summary>\n{neutralise(previous) or '(none yet)'}\n</current_summary>\n"
        f"<new_messages>\n{neutralise(body)}\n</new_messages>"
    )


def summarizer_for(model: Any) -> Summarizer:
    """The summarizer for a model: "extractive" and "local/echo" (or an object whose id it is) get the
    offline extractive one; a "provider/model" string is resolved (None: the DEFAULT_MODEL setting);
    an object is used."""
    if model == EXTRACTIVE or (isinstance(model, str) and model in OFFLINE_MODELS):
        return ExtractiveSummarizer()
    if model is None or isinstance(model, str):
        model = resolve_model(model)
    if getattr(model, "id", None) in OFFLINE_MODELS:
        return ExtractiveSummarizer()
    return ModelSummarizer(model)
