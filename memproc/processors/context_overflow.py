"""ContextOverflowRecovery: when the provider says the request is longer than the model's context
window, drop the oldest history from it and try again."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from memproc.exceptions import ConfigurationError, ModelContextLengthError
from memproc.llm.types import ModelRequest
from memproc.messages import Message
from memproc.processors.base import ProcessorContext
from memproc.processors.token_limiter import tool_call_groups
from memproc.processors.tokens import TokenCounter, check_counter_spec, get_token_counter

__all__ = ["ContextOverflowRecovery"]


class ContextOverflowRecovery:
    """Recovers a turn from `ModelContextLengthError` (OpenAI's HTTP 400 `context_length_exceeded`)
    by trimming the failed request's history and asking for a retry.

    Reads: the failed request (`ctx.request`), the ids memory loaded (`ctx.loaded_ids`), the
    provider's counts when it stated them (`error.limit`, `error.requested`), and the token counter
    (`counter`, default `MEMPROC["TOKENIZER"]`).

    Changes: the request of the retry. It counts the request with the counter and aims for that
    count scaled by limit / requested (times `margin`), so that the provider's own count of the
    trimmed request falls within its window whatever tokenizer the counter is; when the provider
    gave no counts, it aims for `fallback` of the count. It drops history memory loaded, oldest
    first, a tool call and its results together, until the request is within its aim. The later
    model calls of the turn leave out what it dropped (`process_input_step`), so a tool loop does
    not overflow again.

    Never: drops a system message, the turn's new input or its responses so far; changes what is
    saved; retries other errors. With no history left to drop it returns None and the error stands.
    The retries count with the turn's other processor retries (`max_processor_retries`; unset, up
    to 3 after API errors).

    Order: anywhere in `input_processors`. Put a TokenLimiter there too when the window is known:
    it keeps requests within it before the provider has to refuse one.
    """

    id = "context-overflow-recovery"

    def __init__(
        self,
        *,
        counter: TokenCounter | str | Mapping[str, Any] | type | None = None,
        margin: float = 0.9,
        fallback: float = 0.5,
    ) -> None:
        for name, value in (("margin", margin), ("fallback", fallback)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
                raise ConfigurationError(
                    f"ContextOverflowRecovery({name}=...) must be a number between 0 and 1, not {value!r}"
                )
        check_counter_spec(counter, owner="ContextOverflowRecovery")
        self.counter = counter
        self.margin = float(margin)
        self.fallback = float(fallback)

    def process_api_error(self, ctx: ProcessorContext, error: Exception) -> ModelRequest | None:
        if not isinstance(error, ModelContextLengthError) or ctx.request is None:
            return None
        request = ctx.request
        counter = get_token_counter(self.counter)
        messages = list(request.messages)
        costs = [counter.count_message(m) for m in messages]
        total = sum(costs)
        aim = math.floor(total * self._share(error))
        dropped: set[int] = set()
        for group in tool_call_groups(messages):  # oldest first
            if total <= aim:
                break
            if all(_droppable(messages[i], ctx.loaded_ids) for i in group):
                dropped.update(group)
                total -= sum(costs[i] for i in group)
        if not dropped:
            return None
        ctx.state.setdefault("dropped", set()).update(messages[i].id for i in dropped)
        ctx.state["tokens"] = total
        kept = [m for i, m in enumerate(messages) if i not in dropped]
        return dataclasses.replace(request, messages=kept)

    def process_input_step(self, ctx: ProcessorContext) -> list[Message] | None:
        """Leaves out of later model calls the history an overflow already made it drop."""
        dropped = ctx.state.get("dropped")
        if not dropped:
            return None
        return [m for m in ctx.messages if m.id not in dropped]

    def _share(self, error: ModelContextLengthError) -> float:
        """How much of the request to keep: the provider's window over its count of the request."""
        if error.limit and error.requested and error.requested > error.limit:
            return error.limit / error.requested * self.margin
        return self.fallback

    def __repr__(self) -> str:
        return f"ContextOverflowRecovery(margin={self.margin!r}, fallback={self.fallback!r})"


def _droppable(message: Message, loaded_ids: frozenset[str]) -> bool:
    return message.role != "system" and message.id in loaded_ids
