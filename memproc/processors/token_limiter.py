"""TokenLimiter: keeps the prompt within a token budget, and optionally caps the response."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from memproc.events import StreamEvent
from memproc.exceptions import ConfigurationError
from memproc.messages import Message, TextPart, ToolCallPart, ToolResultPart
from memproc.processors.base import ProcessorContext
from memproc.processors.conversation import whole_tool_pairs
from memproc.processors.tokens import TokenCounter, check_counter_spec, get_token_counter
from memproc.processors.turn_info import TokenCount

__all__ = ["TokenLimiter", "tool_call_groups", "truncate_to_tokens"]

OUTPUT_STRATEGIES = ("truncate", "abort")


class TokenLimiter:
    """Fits the prompt into `limit` tokens by dropping the oldest loaded history.

    Reads: `ctx.messages`, `ctx.system_messages`, `ctx.loaded_ids`, and the token counter
    (`counter`, default `MEMPROC["TOKENIZER"]`, resolved at use time).

    Changes, on input and again before every model call (`process_input_step`: a tool loop's calls
    and results grow the prompt): drops whole messages from the history memory loaded, oldest
    first, until system messages + messages + the reply's priming fit in `limit`. An assistant tool
    call and the tool messages answering it go together (never one without the other). Records the
    last call's count in `ctx.state["tokens"]` and the most messages dropped for one call in
    `ctx.state["dropped"]`; returns None when nothing is dropped.

    Changes, on output (only with `output_limit`): `process_output_stream` counts text deltas and,
    past the limit, cuts the crossing delta to fit and drops later text ("truncate") or aborts
    ("abort"); tool calls, tool results and other events always pass. `process_output_result`
    does the same to the assistant text of the turn's responses.

    Never: drops or edits a system message or the turn's own new input (if those alone exceed the
    limit the turn aborts with a clear reason, also when this turn's tool calls and results push a
    later call past it; input aborts are final), edits a message's text on
    input, or mutates what it is given.

    Order: last in `input_processors`, so it measures the prompt the model will get (after recall,
    working memory, ToolCallFilter and guardrails). In `output_processors`, before any processor
    that should see the truncated response.
    """

    id = "token-limiter"
    # Every reply is primed with <|start|>assistant<|message|> (OpenAI's chat format).
    reply_tokens = 3

    def __init__(
        self,
        limit: int,
        *,
        counter: TokenCounter | str | Mapping[str, Any] | type | None = None,
        output_limit: int | None = None,
        output_strategy: str = "truncate",
    ) -> None:
        _check_positive_int("limit", limit)
        if output_limit is not None:
            _check_positive_int("output_limit", output_limit)
        if output_strategy not in OUTPUT_STRATEGIES:
            raise ConfigurationError(
                f"TokenLimiter(output_strategy=...) must be one of {', '.join(OUTPUT_STRATEGIES)}, "
                f"not {output_strategy!r}"
            )
        check_counter_spec(counter, owner="TokenLimiter")
        self.limit = limit
        self.counter = counter
        self.output_limit = output_limit
        self.output_strategy = output_strategy

    def get_counter(self) -> TokenCounter:
        return get_token_counter(self.counter)

    # --- input ---------------------------------------------------------------------------------

    def process_input(self, ctx: ProcessorContext) -> list[Message] | None:
        return self._fit(ctx)

    def process_input_step(self, ctx: ProcessorContext) -> list[Message] | None:
        """Before every model call: a tool loop's calls and results grow the prompt, and a provider
        answers 400 past its context window, so each call is fitted again (as Mastra's limiter
        does). This turn's responses are never dropped; only history memory loaded is."""
        return self._fit(ctx)

    def _fit(self, ctx: ProcessorContext) -> list[Message] | None:
        counter = self.get_counter()
        # What the model will get: the halves of tool pairs that memory loaded incomplete are left
        # out of the request (rule 16), so they must not count against the limit either.
        new = {m.id for m in ctx.messages if m.id not in ctx.loaded_ids}
        messages = whole_tool_pairs(list(ctx.messages), protected=new)
        costs = [counter.count_message(m) for m in messages]
        system_tokens = sum(counter.count_message(m) for m in ctx.system_messages)

        pinned: list[list[int]] = []
        droppable: list[list[int]] = []
        for group in tool_call_groups(messages):
            keep = any(messages[i].id not in ctx.loaded_ids or messages[i].role == "system" for i in group)
            (pinned if keep else droppable).append(group)

        input_tokens = sum(costs[i] for group in pinned for i in group)
        fixed = system_tokens + input_tokens + self.reply_tokens
        if fixed > self.limit:
            what = "the new messages" if ctx.step == 0 else "the new messages and this turn's tool calls"
            ctx.abort(
                f"The input needs {fixed} tokens ({system_tokens} in system messages, {input_tokens} in "
                f"{what}) but the token limit is {self.limit}; dropping older history cannot "
                "make it fit. Shorten the input or the instructions, or raise the limit.",
                metadata={
                    "limit": self.limit,
                    "tokens": fixed,
                    "system_tokens": system_tokens,
                    "input_tokens": input_tokens,
                    "step": ctx.step,
                },
            )

        total = fixed + sum(costs[i] for group in droppable for i in group)
        dropped: set[int] = set()
        for group in droppable:  # oldest first
            if total <= self.limit:
                break
            dropped.update(group)
            total -= sum(costs[i] for i in group)

        ctx.state["tokens"] = total
        ctx.state["dropped"] = max(len(dropped), ctx.state.get("dropped", 0))
        if ctx.turn is not None:  # shown with the result: "what memory put in front of the model"
            ctx.turn.info.tokens = TokenCount(total, self.limit, ctx.state["dropped"])
        if not dropped:
            return None
        return [m for i, m in enumerate(messages) if i not in dropped]

    # --- output --------------------------------------------------------------------------------

    def process_output_stream(self, ctx: ProcessorContext, part: StreamEvent) -> StreamEvent | None:
        limit = self.output_limit
        if limit is None or part.type != "text-delta" or not part.text:
            return part
        if ctx.state.get("output_truncated"):
            return None
        counter = self.get_counter()
        used = ctx.state.get("output_tokens", 0)
        tokens = used + counter.count_text(part.text)
        if tokens <= limit:
            ctx.state["output_tokens"] = tokens
            return part
        if self.output_strategy == "abort":
            self._abort_output(ctx, tokens)
        text = truncate_to_tokens(counter, part.text, limit - used)
        ctx.state["output_truncated"] = True
        ctx.state["output_tokens"] = used + counter.count_text(text)
        return dataclasses.replace(part, text=text) if text else None

    def process_output_result(self, ctx: ProcessorContext) -> list[Message] | None:
        limit = self.output_limit
        if limit is None:
            return None
        counter = self.get_counter()
        new_ids = {m.id for m in ctx.new_messages}
        used = 0
        truncated = False
        changed = False
        result: list[Message] = []
        for message in ctx.messages:
            if message.role != "assistant" or message.id not in new_ids:
                result.append(message)
                continue
            parts: list[Any] = []
            for part in message.parts:
                if not isinstance(part, TextPart):
                    parts.append(part)
                    continue
                if truncated:
                    continue
                tokens = counter.count_text(part.text)
                if used + tokens <= limit:
                    used += tokens
                    parts.append(part)
                    continue
                if self.output_strategy == "abort":
                    self._abort_output(ctx, used + tokens)
                text = truncate_to_tokens(counter, part.text, limit - used)
                used += counter.count_text(text)
                truncated = True
                if text:
                    parts.append(TextPart(text))
            if len(parts) == len(message.parts) and all(
                a is b for a, b in zip(parts, message.parts, strict=True)
            ):
                result.append(message)
                continue
            changed = True
            if parts:  # an assistant message left with nothing to say is dropped
                result.append(message.replace(parts=tuple(parts)))
        ctx.state["output_tokens"] = used
        if truncated:
            ctx.state["output_truncated"] = True
        return result if changed else None

    def _abort_output(self, ctx: ProcessorContext, tokens: int) -> NoReturn:
        ctx.abort(
            f"The response exceeded the output limit of {self.output_limit} tokens ({tokens} tokens).",
            metadata={"limit": self.output_limit, "tokens": tokens},
        )

    def __repr__(self) -> str:
        return f"TokenLimiter({self.limit}, output_limit={self.output_limit!r})"


def tool_call_groups(messages: Sequence[Message]) -> list[list[int]]:
    """Indices of `messages` grouped so a tool call and the results answering it are never split.

    Messages that share a tool_call_id (the assistant message calling, the tool message answering)
    land in one group; every other message is a group of its own. Groups are ordered by their
    first message, indices ascending.
    """
    parent = list(range(len(messages)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first_seen: dict[str, int] = {}
    for index, message in enumerate(messages):
        for part in message.parts:
            if isinstance(part, (ToolCallPart, ToolResultPart)) and part.tool_call_id:
                other = first_seen.setdefault(part.tool_call_id, index)
                a, b = find(index), find(other)
                if a != b:
                    parent[max(a, b)] = min(a, b)

    groups: dict[int, list[int]] = {}
    for index in range(len(messages)):
        groups.setdefault(find(index), []).append(index)
    return sorted(groups.values(), key=lambda group: group[0])


def truncate_to_tokens(counter: TokenCounter, text: str, budget: int) -> str:
    """The longest prefix of `text` that the counter puts at `budget` tokens or fewer."""
    if budget <= 0 or not text:
        return ""
    if counter.count_text(text) <= budget:
        return text
    low, high = 0, len(text)  # count(text[:low]) <= budget < count(text[:high])
    guess = min(len(text), budget * 16)  # tokens rarely span 16 characters: a cheaper first bound
    if guess < high:
        if counter.count_text(text[:guess]) > budget:
            high = guess
        else:
            low = guess
    while high - low > 1:
        middle = (low + high) // 2
        if counter.count_text(text[:middle]) <= budget:
            low = middle
        else:
            high = middle
    return text[:low]


def _check_positive_int(name: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ConfigurationError(f"TokenLimiter({name}=...) must be a positive int, not {value!r}")
