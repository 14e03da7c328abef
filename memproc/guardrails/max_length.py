"""MaxLength: blocks input (and optionally responses) longer than a number of characters."""

from __future__ import annotations

from collections.abc import Iterable

from memproc.events import StreamEvent
from memproc.guardrails import _options
from memproc.guardrails._text import caller_texts, response_targets
from memproc.messages import Message
from memproc.processors.base import ProcessorContext

__all__ = ["MaxLength"]

PHASES = ("input", "output")


class MaxLength:
    """Blocks a turn whose input, or whose response, is longer than `limit` characters.

    Reads: on input, the text of the turn's new user messages (`ctx.new_messages`), summed, so an
    input split over several messages counts whole; on output (only when `on` includes "output"),
    the text of the model's responses, and on the stream the running total of the text deltas.
    Length is counted in characters (code points), not tokens: use TokenLimiter for token budgets.

    Changes: nothing. Over the limit it aborts with the reason "Input longer than N characters"
    (or "Response ...") and metadata `{"length", "limit"}`; on the stream it aborts at the delta
    that crosses the limit, so no more than `limit` characters reach the client. `retry=True` asks
    the model for a shorter answer (DESIGN §2 rule 6; input aborts are always final).

    Never: edits or truncates text (TokenLimiter truncates); counts history that memory loaded,
    system messages or tool results; mutates what it is given.

    Order: in `input_processors`, after UnicodeNormalizer (which may shorten the text) and before
    any processor that calls a model, so oversized input costs nothing.
    """

    id = "max-length"

    def __init__(self, *, limit: int, on: str | Iterable[str] = "input", retry: bool = False) -> None:
        self.limit = _options.positive_int("MaxLength", "limit", limit)
        self.on = _options.phases("MaxLength", on, allowed=PHASES, name="on")
        self.channels = frozenset(
            c for p in self.on for c in (("output", "stream") if p == "output" else (p,))
        )
        self.retry = _options.boolean("MaxLength", "retry", retry)

    @property
    def needs_stream_policy(self) -> str:
        """On output, "sentences": the sentence that crosses the limit is screened before it is
        released, so none of it reaches the client (memproc.turns.stream_policy)."""
        return "sentences" if "output" in self.on else "live"

    def process_input(self, ctx: ProcessorContext) -> list[Message] | None:
        if "input" in self.on:
            length = sum(len(m.text) for m in caller_texts(ctx))
            if length > self.limit:
                ctx.abort(
                    f"Input longer than {self.limit} characters ({length}).",
                    metadata={"length": length, "limit": self.limit},
                )
        return None

    def process_output_result(self, ctx: ProcessorContext) -> list[Message] | None:
        if "output" in self.on:
            length = sum(len(m.text) for m in response_targets(ctx))
            if length > self.limit:
                self._abort_output(ctx, length)
        return None

    def process_output_stream(self, ctx: ProcessorContext, part: StreamEvent) -> StreamEvent | None:
        if "output" in self.on and part.type == "text-delta" and part.text:
            attempt = tuple(m.id for m in ctx.system_messages)  # a retry adds a feedback message
            if ctx.state.get("attempt") != attempt:
                ctx.state["attempt"], ctx.state["streamed"] = attempt, 0
            length = ctx.state["streamed"] + len(part.text)
            ctx.state["streamed"] = length
            if length > self.limit:
                self._abort_output(ctx, length)
        return part

    def _abort_output(self, ctx: ProcessorContext, length: int) -> None:
        ctx.abort(
            f"Response longer than {self.limit} characters ({length}).",
            retry=self.retry and ctx.phase == "output",  # stream aborts are never retried
            metadata={"length": length, "limit": self.limit},
        )

    def __repr__(self) -> str:
        return f"MaxLength(limit={self.limit}, on={sorted(self.on)!r})"
