"""Stream policies: when a streamed turn's text may reach the client, so that what an output
guardrail blocks is never read before its tripwire arrives.

- "live": every part is released as the model makes it (after `process_output_stream`). A
  guardrail that judges the result (`process_output_result`) blocks a reply the client already
  read.
- "sentences": text is released one completed sentence at a time, after the screening guardrails
  (the output processors that need "sentences") ran `process_output_result` on the text so far. A
  sentence they block never reaches the client; the sentences before it did.
- "hold": nothing is released until the turn's result guardrails passed; then all of it, in order.

Every protocol (memproc's SSE, the OpenAI and AI SDK streams, and `<memproc-chat>` on the AI SDK
one) encodes the events the turn engine emits, and the engine emits them through `StreamGate`, so
the policy holds for all of them alike.

A processor declares the weakest policy under which its blocks do not leak with the attribute
`needs_stream_policy` (absent: "live"). `policy_for` gives a call its policy: by default the
strictest its output processors need; a weaker one chosen explicitly is refused unless the agent
was built with `allow_unscreened_stream=True`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal

from memproc.events import StreamEvent
from memproc.exceptions import ConfigurationError, ValidationError
from memproc.processors.base import processor_id
from memproc.turns.effects import Blocking, EngineStep

__all__ = [
    "POLICIES",
    "StreamGate",
    "StreamPolicy",
    "complete_until",
    "needed_policy",
    "policy_for",
    "screening_chain",
]

StreamPolicy = Literal["live", "sentences", "hold"]
# From the weakest to the strictest.
POLICIES: tuple[StreamPolicy, ...] = ("live", "sentences", "hold")


# --- which policy a call gets ----------------------------------------------------------------------


def needs_of(processor: Any) -> StreamPolicy:
    """The policy a processor declares it needs (`needs_stream_policy`; "live" when it declares none)."""
    need = getattr(processor, "needs_stream_policy", "live")
    if need not in POLICIES:
        raise ConfigurationError(
            f"Processor {processor_id(processor)!r} has needs_stream_policy={need!r}; "
            f"expected one of {', '.join(POLICIES)}"
        )
    return need  # type: ignore[no-any-return]


def needed_policy(output_chain: Iterable[Any]) -> tuple[StreamPolicy, list[str]]:
    """The strictest policy the output processors need, and the ids of those that need it."""
    needs = [(needs_of(p), processor_id(p)) for p in output_chain]
    strictest = max((POLICIES.index(need) for need, _ in needs), default=0)
    policy = POLICIES[strictest]
    return policy, [pid for need, pid in needs if need == policy and policy != "live"]


def policy_for(
    output_chain: Sequence[Any],
    chosen: Any,
    *,
    allow_unscreened: bool,
    error: type[ConfigurationError] | type[ValidationError] = ConfigurationError,
) -> StreamPolicy:
    """The policy of a call: `chosen`, or when None the strictest one the chain needs. A chosen
    policy weaker than that could let a blocked reply reach the client; it raises `error` unless
    the agent opted in with `allow_unscreened_stream=True`."""
    needed, by = needed_policy(output_chain)
    if chosen is None:
        return needed
    if chosen not in POLICIES:
        raise error(f"stream_policy must be one of {', '.join(POLICIES)}, not {chosen!r}")
    if POLICIES.index(chosen) < POLICIES.index(needed) and not allow_unscreened:
        raise error(
            f"stream_policy={chosen!r} would stream text before {', '.join(by)} screened it (it needs "
            f"{needed!r}): a reply it blocks would reach the client. Use stream_policy={needed!r}, or "
            "build the agent with allow_unscreened_stream=True to accept that."
        )
    return chosen  # type: ignore[no-any-return]


def screening_chain(output_chain: Iterable[Any]) -> list[Any]:
    """The processors whose `process_output_result` screens each sentence under "sentences": those
    that need that policy (their result hook may run on the text so far)."""
    return [
        p
        for p in output_chain
        if needs_of(p) == "sentences" and getattr(p, "process_output_result", None) is not None
    ]


# --- sentences ---------------------------------------------------------------------------------------

_ENDS = ".!?…"
_WIDE_ENDS = "。！？"  # end a sentence with no space after them
_CLOSERS = "\"'”’)]}»*_`"
# Words a period follows without ending a sentence. Merging two sentences is safe (the pair is
# screened together); splitting one would release its first half before the rest was screened.
_ABBREVIATIONS = frozenset(
    "mr mrs ms dr prof sr jr st mt vs etc cf fig figs no nos vol approx inc ltd co corp dept est "
    "al jan feb mar apr jun jul aug sep sept oct nov dec".split()
)


def complete_until(text: str, start: int = 0) -> int:
    """Where the last complete sentence of `text[start:]` ends (an index into `text`, after the
    spaces that follow it), or `start` when none is complete yet.

    A sentence ends at a line break, or at ".", "!", "?" or "…" (with any closing quotes or brackets)
    followed by white space; a period after a known abbreviation, an initial ("J.") or a word with
    inner dots ("e.g.", "U.S.") does not end one, nor does a list number at the start of a line
    ("1."). A decimal ("3.14") has no space after its period. The text at the end of the stream
    that has no end yet is the caller's to release once the stream is over."""
    end = start
    i, n = start, len(text)
    while i < n:
        char = text[i]
        if char == "\n":
            end = i + 1
        elif char in _WIDE_ENDS:
            end = _skip(text, i + 1, _CLOSERS)
        elif char in _ENDS:
            j = _after_end(text, i)
            if j < n and text[j].isspace() and not (char == "." and _abbreviated(text, i)):
                end = _skip(text, j, " \t")
            i = j
            continue
        i += 1
    return end


def _after_end(text: str, i: int) -> int:
    """The index after a run of end marks ("?!", "...") and the closers that follow it."""
    return _skip(text, _skip(text, i + 1, _ENDS), _CLOSERS)


def _skip(text: str, i: int, chars: str) -> int:
    while i < len(text) and text[i] in chars:
        i += 1
    return i


def _abbreviated(text: str, period: int) -> bool:
    """Whether the period at `period` closes an abbreviation, an initial or a list number."""
    start = period
    while start > 0 and (text[start - 1].isalnum() or text[start - 1] == "."):
        start -= 1
    word = text[start:period]
    if not word:
        return False
    if "." in word or word.lower() in _ABBREVIATIONS or (len(word) == 1 and word.isalpha()):
        return True
    line_start = text.rfind("\n", 0, start) + 1
    return word.isdigit() and not text[line_start:start].strip()


# --- the gate -------------------------------------------------------------------------------------


class StreamGate:
    """Between the turn engine and the client: holds what the policy does not release yet.

    Its methods are generators of the engine's kind (stream events and `Blocking` effects), used
    with `yield from`. Text deltas go through `text`, tool calls and results through `other`; a
    retry or a block calls `drop` (the held draft never reaches the client); `release` gives the
    rest once the result guardrails passed. Under "sentences" `step` starts each model call with
    the function that screens that call's text so far (None: nothing screens)."""

    def __init__(self, policy: StreamPolicy) -> None:
        self.policy = policy
        self.held: list[StreamEvent] = []  # "hold": every event; "sentences": this step's text
        self.step_text = ""
        self.released = 0  # how much of step_text reached the client
        self.screen: Callable[[str], Any] | None = None

    def step(self, screen: Callable[[str], Any] | None) -> None:
        """A model call starts: its text is new (what an earlier call left held is released first
        by `other`, or dropped by `drop`)."""
        self.screen = screen
        if self.policy == "sentences":
            self.step_text, self.released, self.held = "", 0, []

    def text(self, event: StreamEvent) -> EngineStep:
        if self.policy == "live":
            yield event
            return
        self.held.append(event)
        if self.policy == "hold":
            return
        self.step_text += event.text
        end = complete_until(self.step_text, self.released)
        if end > self.released:
            yield from self._screened(end)

    def other(self, event: StreamEvent) -> EngineStep:
        """A tool call or result: after the text before it, which under "sentences" is screened whole
        first (the model's step is over)."""
        if self.policy == "hold":
            self.held.append(event)
            return
        if self.policy == "sentences" and len(self.step_text) > self.released:
            yield from self._screened(len(self.step_text))
        yield event

    def drop(self) -> None:
        """Forgets what is held: a rejected draft or a blocked turn."""
        self.held, self.step_text, self.released = [], "", 0

    def release(self) -> list[StreamEvent]:
        """Everything still held, in order: the turn's result guardrails passed."""
        out, self.held = self.held, []
        self.released = len(self.step_text)
        return out

    def _screened(self, end: int) -> EngineStep:
        if self.screen is not None:
            yield Blocking(self.screen, (self.step_text[:end],))
        yield from self._take(end - self.released)
        self.released = end

    def _take(self, count: int) -> list[StreamEvent]:
        """The held deltas that hold the next `count` characters, the last one split if it must be."""
        out: list[StreamEvent] = []
        while count > 0 and self.held:
            event = self.held[0]
            if len(event.text) <= count:
                out.append(self.held.pop(0))
                count -= len(event.text)
            else:
                out.append(dataclasses.replace(event, text=event.text[:count]))
                self.held[0] = dataclasses.replace(event, text=event.text[count:])
                count = 0
        return out
