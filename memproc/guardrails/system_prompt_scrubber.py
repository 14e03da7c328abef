"""SystemPromptScrubber: keeps the agent's system prompt out of its responses."""

from __future__ import annotations

import base64
import binascii
import logging
import re
from collections.abc import Sequence

from memproc.events import StreamEvent
from memproc.exceptions import ConfigurationError
from memproc.guardrails import _options
from memproc.guardrails._overlap import ProtectedText, protected
from memproc.guardrails._stream import repair, stream_part
from memproc.guardrails._text import map_text
from memproc.messages import Message
from memproc.processors.base import ProcessorContext

__all__ = ["SystemPromptScrubber"]

logger = logging.getLogger("memproc.guardrails")

STRATEGIES = ("redact", "block", "warn")
# System messages that carry the user's own data rather than the agent's prompt (DESIGN §2 rules
# 14-15), and the runner's retry feedback; leaving them out avoids flagging a model that quotes
# the user back to themselves.
MEMORY_MESSAGE_IDS = ("working-memory", "semantic-recall")
FEEDBACK_PREFIX = "[Processor Feedback]"
_BASE64_RUN = re.compile(r"(?<![A-Za-z0-9+/=_-])[A-Za-z0-9+/_-]{20,}={0,2}(?![A-Za-z0-9+/=_-])")
_TRAILING_BASE64 = re.compile(r"[A-Za-z0-9+/_-]{8,}={0,2}\Z")


class SystemPromptScrubber:
    """Finds the agent's system prompt repeated in its responses and redacts it, blocks, or warns.

    Reads: the agent's instructions (`ctx.agent.instructions`) and the system messages the model
    saw (`ctx.system_messages`; the working-memory and recall messages only with
    `include_memory=True`, as they hold the user's own data), and, on output, the text parts of the
    model's responses and the streamed text deltas. A leak is any stretch of the response that
    repeats at least `min_overlap_chars` characters of the prompt, compared without regard to case,
    whitespace, punctuation (words joined by hyphens, underscores or dots read as words) or
    zero-width characters (a suffix automaton, linear in both lengths, built once per distinct
    prompt), and any base64 run that decodes to such a stretch. A prompt shorter than
    `min_overlap_chars` cannot be detected; a paraphrase or a translation is not detected.

    Changes, with "redact" (the default): returns copies of the responses with each leaked stretch
    replaced by `redaction` ("[SYSTEM_PROMPT]"; "" removes it). On the stream it holds back the
    text that is currently repeating the prompt, however long, and a trailing run of base64
    characters until it ends, and releases it (redacted when it grew to a leak) once the response
    moves on or the step ends; other text passes with no delay. With "block" it aborts, with
    metadata `{"leaked_chars", "longest", "spans"}` (`retry=True` asks the model for another
    answer); with "warn" it logs and records the leak in `ctx.state["leaks"]`, leaving the text
    alone.

    Never: reads the turn's input or history; puts prompt text in a log line or metadata; mutates
    what it is given.

    Order: in `output_processors`, before PIIDetector if both redact (then each placeholder is
    final); the memory processors run after it and save the scrubbed response.
    """

    id = "system-prompt-scrubber"
    channels = frozenset({"output", "stream"})

    def __init__(
        self,
        *,
        strategy: str = "redact",
        min_overlap_chars: int = 40,
        redaction: str = "[SYSTEM_PROMPT]",
        include_memory: bool = False,
        retry: bool = False,
    ) -> None:
        owner = "SystemPromptScrubber"
        self.strategy = _options.choice(owner, "strategy", strategy, STRATEGIES)
        self.min_overlap_chars = _options.positive_int(
            owner, "min_overlap_chars", min_overlap_chars, minimum=8
        )
        if not isinstance(redaction, str):
            raise ConfigurationError(f"{owner}(redaction=...) must be a string, not {redaction!r}")
        self.redaction = redaction
        self.include_memory = _options.boolean(owner, "include_memory", include_memory)
        self.retry = _options.boolean(owner, "retry", retry)

    # --- detection -----------------------------------------------------------------------------

    def prompt_texts(self, ctx: ProcessorContext) -> tuple[str, ...]:
        texts: list[str] = []
        instructions = getattr(ctx.agent, "instructions", None)
        if isinstance(instructions, str) and instructions.strip():
            texts.append(instructions)
        for message in ctx.system_messages:
            if not self.include_memory and message.id.startswith(MEMORY_MESSAGE_IDS):
                continue
            text = message.text
            if text.strip() and not text.startswith(FEEDBACK_PREFIX):
                texts.append(text)
        return tuple(dict.fromkeys(texts))

    def index(self, ctx: ProcessorContext) -> ProtectedText | None:
        texts = self.prompt_texts(ctx)
        return protected(texts) if texts else None

    def leaks(self, index: ProtectedText, text: str) -> tuple[list[tuple[int, int]], int, int]:
        """(spans of `text` that repeat the prompt, merged: verbatim stretches and base64 runs that
        decode to one; where the still-growing match at the end starts; its canonical length)."""
        spans, hold, growing = index.leaks(text, self.min_overlap_chars)
        encoded = [m.span() for m in _BASE64_RUN.finditer(text) if self._decodes_to_leak(index, m.group())]
        if encoded:
            spans = _merge([*spans, *encoded])
        return spans, hold, growing

    def _decodes_to_leak(self, index: ProtectedText, blob: str) -> bool:
        try:
            raw = base64.b64decode(blob.replace("-", "+").replace("_", "/") + "=" * (-len(blob) % 4))
            decoded = raw.decode("utf-8")
        except (binascii.Error, ValueError):
            return False
        return bool(index.leaks(decoded, self.min_overlap_chars)[0])

    def scrub(self, text: str, spans: Sequence[tuple[int, int]]) -> str:
        out: list[str] = []
        cursor = 0
        for start, end in spans:
            out.append(text[cursor:start])
            out.append(self.redaction)
            cursor = end
        out.append(text[cursor:])
        return "".join(out)

    # --- hooks ---------------------------------------------------------------------------------

    def process_output_result(self, ctx: ProcessorContext) -> list[Message] | None:
        before = list(ctx.messages)
        messages = repair(self, ctx, before)
        index = self.index(ctx)
        if index is None:
            return None if messages is before else messages
        found: list[tuple[int, int]] = []

        def handle(text: str) -> str:
            spans, _, _ = self.leaks(index, text)
            found.extend(spans)
            return self.scrub(text, spans) if spans and self.strategy == "redact" else text

        replaced: dict[str, Message] = {}
        for message in messages:
            if message.id in ctx.loaded_ids or message.role != "assistant":
                continue
            changed = map_text(message, handle)
            if changed is not message:
                replaced[message.id] = changed
        if found:
            self._act(ctx, found)
        if replaced:
            return [replaced.get(m.id, m) for m in messages]
        return None if messages is before else messages

    def process_output_stream(
        self, ctx: ProcessorContext, part: StreamEvent
    ) -> StreamEvent | list[StreamEvent] | None:
        if self.strategy == "warn" or self.index(ctx) is None:
            return part  # warn: the whole response is checked once, in process_output_result
        return stream_part(self, ctx, part)

    # --- the stream guard (see memproc.guardrails._stream) -------------------------------------

    def release(self, ctx: ProcessorContext, pending: str) -> tuple[str, str]:
        index = self.index(ctx)
        if index is None:
            return pending, ""
        spans, hold, growing = self.leaks(index, pending)
        if growing >= self.min_overlap_chars and self.strategy == "block":
            self._act(ctx, spans)
        encoded_tail = _TRAILING_BASE64.search(pending)
        if encoded_tail:  # it may be an encoded copy of the prompt still arriving
            hold = min(hold, encoded_tail.start())
        for start, end in spans:
            if start < hold < end:
                hold = start
        done = [(s, e) for s, e in spans if e <= hold]
        if done:
            self._act(ctx, done)
        return self.scrub(pending[:hold], done), pending[hold:]

    def flush(self, ctx: ProcessorContext, pending: str) -> str:
        index = self.index(ctx)
        if index is None:
            return pending
        spans, _, _ = self.leaks(index, pending)
        if spans:
            self._act(ctx, spans)
        return self.scrub(pending, spans)

    # --- internals -----------------------------------------------------------------------------

    def _act(self, ctx: ProcessorContext, spans: Sequence[tuple[int, int]]) -> None:
        lengths = [end - start for start, end in spans]
        metadata = {"leaked_chars": sum(lengths), "longest": max(lengths), "spans": len(lengths)}
        ctx.state.setdefault("leaks", []).append({"phase": ctx.phase, **metadata})
        if self.strategy == "block":
            ctx.abort(
                f"The response repeats the system prompt ({metadata['leaked_chars']} characters).",
                retry=self.retry and ctx.phase == "output",
                metadata=metadata,
            )
        if self.strategy == "warn":
            logger.warning(
                "memproc: %s found %d characters of the system prompt in the response (allowed: warn)",
                self.id,
                metadata["leaked_chars"],
            )

    def __repr__(self) -> str:
        return f"SystemPromptScrubber(strategy={self.strategy!r}, min_overlap_chars={self.min_overlap_chars})"


def _merge(spans: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[list[int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(s, e) for s, e in merged]
