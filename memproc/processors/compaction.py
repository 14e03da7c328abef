"""Compaction of long threads: the options, the summary's system message, when a fold is due, where
folds may cut, and the offline extractive summarizer.

Pure functions over message lists, no storage: MessageHistory uses them during a turn (it loads the
summary and decides whether a fold is due), the compaction service (memproc.services.compaction)
in the background job that folds messages into the summary.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from memproc.exceptions import ConfigurationError
from memproc.messages import Message, thaw
from memproc.messages.prompt_tags import neutralise
from memproc.processors.store import ThreadSummaryValue
from memproc.processors.token_limiter import tool_call_groups
from memproc.processors.tokens import TokenCounter

__all__ = [
    "EXTRACTIVE",
    "SUMMARY_MESSAGE_ID",
    "CompactionDue",
    "CompactionOptions",
    "ExtractiveSummarizer",
    "fold_chunks",
    "fold_due",
    "foldable",
    "summary_message",
]

SUMMARY_MESSAGE_ID = "thread-summary"
# `Memory(compaction={"model": "extractive"})`: the offline summarizer whatever the agent's model.
EXTRACTIVE = "extractive"
# Models that cannot summarize: the offline echo model gets the extractive summarizer.
OFFLINE_MODELS = frozenset({"local/echo"})

SUMMARY_HEADER = (
    "CONVERSATION SUMMARY\n"
    "The earlier part of this conversation is summarized below; the messages after it follow in "
    "full. Treat the summary as what was said before them."
)


@dataclass(frozen=True, slots=True)
class CompactionOptions:
    """`Memory(compaction={...})`: when the thread's uncovered messages outside the history window
    reach `trigger_tokens`, a background job folds them into the thread's summary, which is kept
    within `keep_tokens`. `model`: "provider/model", "extractive", or None for the agent's model."""

    trigger_tokens: int = 6000
    keep_tokens: int = 2000
    model: str | None = None

    def __post_init__(self) -> None:
        for name in ("trigger_tokens", "keep_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigurationError(f"Memory(compaction={{'{name}': ...}}) must be a positive integer")
        if self.model is not None and (not isinstance(self.model, str) or not self.model.strip()):
            raise ConfigurationError(
                "Memory(compaction={'model': ...}) must be a 'provider/model' string, 'extractive' or None "
                "(the job runs on a worker, so it names a model rather than holding one)"
            )

    @classmethod
    def of(cls, value: CompactionOptions | Mapping[str, Any] | None) -> CompactionOptions | None:
        if value is None or isinstance(value, CompactionOptions):
            return value
        if isinstance(value, Mapping):
            try:
                return cls(**value)
            except TypeError as exc:
                raise ConfigurationError(f"Memory(compaction=...): {exc}") from exc
        raise ConfigurationError("compaction must be CompactionOptions, a dict or None")


@dataclass(frozen=True, slots=True)
class CompactionDue:
    """A fold MessageHistory found due this turn: a write (`TurnWrites.compaction`) that the turn's
    commit enqueues in its own transaction, and drops with the rest when the turn saves nothing.
    `agent_model` is the agent's model as a worker can resolve it (None: the DEFAULT_MODEL)."""

    through_sequence: int
    estimated_tokens: int
    trigger_tokens: int
    keep_tokens: int
    model: str | None
    agent_model: str | None

    def as_dict(self) -> dict[str, Any]:
        """The job's request, and the `compaction` entry of the turn result's `memory`."""
        return {
            "due": True,
            "through_sequence": self.through_sequence,
            "estimated_tokens": self.estimated_tokens,
            "trigger_tokens": self.trigger_tokens,
            "keep_tokens": self.keep_tokens,
            "model": self.model,
            "agent_model": self.agent_model,
        }


def summary_message(summary: ThreadSummaryValue) -> Message:
    """The one system message that carries the summary into the prompt (before history)."""
    return Message.create(
        "system",
        f"{SUMMARY_HEADER}\n<conversation_summary>\n{neutralise(summary.text)}\n</conversation_summary>",
        id=SUMMARY_MESSAGE_ID,
    )


def fold_due(
    *,
    covered: int,
    window_start: int,
    sample_tokens: Sequence[int],
    trigger_tokens: int,
    counted_through: int = 0,
    counted_tokens: int = 0,
) -> tuple[int, int] | None:
    """(through_sequence, estimated tokens) when the uncovered messages before the history window
    (sequences `covered` < s < `window_start`) are estimated at `trigger_tokens` or more; else None.

    What a job already counted (through `counted_through`: `counted_tokens`) is taken as counted;
    the rest is estimated as its number of messages times the mean of `sample_tokens` (the window's
    costs), with no query. The job counts exactly and does nothing when the estimate was high.
    """
    if window_start - 1 <= covered or not sample_tokens:
        return None
    known = counted_tokens if counted_through > covered else 0
    rest = max(0, window_start - 1 - max(covered, counted_through))
    estimate = known + round(rest * sum(sample_tokens) / len(sample_tokens))
    return (window_start - 1, estimate) if estimate >= trigger_tokens else None


def foldable(messages: Sequence[Message]) -> list[Message]:
    """`messages` (a thread's, in order) without a tail that ends inside a tool pair: when the last
    non-tool message is an assistant call whose results are not all among the tool messages after
    it, that call and those results stay out (the rest of the pair lies beyond, in the window)."""
    last = max((i for i, m in enumerate(messages) if m.role != "tool"), default=-1)
    if last < 0 or messages[last].role != "assistant" or not messages[last].tool_calls:
        return list(messages)
    answered = {r.tool_call_id for m in messages[last + 1 :] for r in m.tool_results}
    if all(c.tool_call_id in answered for c in messages[last].tool_calls):
        return list(messages)
    return list(messages[:last])


def fold_chunks(messages: Sequence[Message], costs: Sequence[int], *, limit: int) -> list[list[Message]]:
    """Consecutive runs of `messages` of at most `limit` tokens each (a run holding a single tool
    call group may be larger), cut only where no tool call and its results would be parted."""
    spans = [(g[0], g[-1]) for g in tool_call_groups(messages)]
    blocked: set[int] = set()  # cut points i (between i-1 and i) inside a group
    for first, last in spans:
        blocked.update(range(first + 1, last + 1))
    chunks: list[list[Message]] = []
    start, used = 0, 0
    for i, cost in enumerate(costs):
        if i > start and i not in blocked and used + cost > limit:
            chunks.append(list(messages[start:i]))
            start, used = i, 0
        used += cost
    if start < len(messages):
        chunks.append(list(messages[start:]))
    return chunks


# --- the extractive summarizer --------------------------------------------------------------------

_BULLET = re.compile(r"^- (user|assistant|tool): (.+)$")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
_BRACKETED = re.compile(r"\[[^\]]*\]")
_WORD = re.compile(r"[\w'-]+")
# Who the user is: what a summary must not lose.
_IDENTITY = re.compile(
    r"\b(?:my name(?: is|'s)|call me|i live in|i work (?:as|at|for)|i(?: am|'m) (?:a|an|\d)|i was born|"
    r"remember that)\b",
    re.I,
)
_FIRST_PERSON = re.compile(
    r"\b(?:i am|i'm|i was|i have|i've|i live|i work|i like|i love|i prefer|i need|i want|i use|"
    r"my|we are|we're|our)\b",
    re.I,
)
_PROPER_NOUN = re.compile(r"(?<=[\w,;:] )[A-Z][\w'-]+")
MAX_SENTENCE_WORDS = 40
MAX_TOOL_WORDS = 12
ROLE_WEIGHT = {"user": 3, "assistant": 1, "tool": 0}
NOTE_WEIGHT = 100  # lines that are not our bullets (an operator's edit, another summarizer's prose)
DUPLICATE_SHARE = 0.8


@dataclass(frozen=True, slots=True)
class _Line:
    role: str  # "user" | "assistant" | "tool" | "" (a note kept verbatim)
    text: str
    order: int

    @property
    def rendered(self) -> str:
        return f"- {self.role}: {self.text}" if self.role else self.text

    @property
    def score(self) -> int:
        if not self.role:
            return NOTE_WEIGHT
        score = ROLE_WEIGHT[self.role]
        if _IDENTITY.search(self.text):
            score += 3
        if _FIRST_PERSON.search(self.text):
            score += 2
        if any(ch.isdigit() for ch in self.text):
            score += 1
        if _PROPER_NOUN.search(self.text):
            score += 1
        if self.text.rstrip().endswith("?"):
            score -= 2
        return score


class ExtractiveSummarizer:
    """An offline, deterministic summarizer: the summary is a list of sentences taken from the
    messages ("- user: My name is Ada."), in the order they were said.

    Each fold adds the new messages' sentences (bracketed asides dropped, long sentences cut, a
    sentence that mostly repeats a kept one skipped) to the previous summary's; while the summary
    is over `budget` tokens it drops the least telling sentences first: questions and small talk
    before what the user said about themselves, names and numbers, and who the user is (name, home,
    work) last; the oldest first among equals. Lines of the previous summary that are not its own
    bullets (an operator's edit) are kept as they are unless nothing else is left to drop.
    """

    id = EXTRACTIVE

    def summarize(
        self, *, previous: str, messages: Sequence[Message], budget: int, counter: TokenCounter
    ) -> str:
        lines = _parse(previous)
        postings: dict[str, list[int]] = {}  # word -> the lines holding it
        for index, line in enumerate(lines):
            for word in set(_words(line.text)):
                postings.setdefault(word, []).append(index)
        for role, sentence in _sentences(messages):
            words = set(_words(sentence))
            if not words or _repeats(words, postings):
                continue
            for word in words:
                postings.setdefault(word, []).append(len(lines))
            lines.append(_Line(role, sentence, len(lines)))
        return _within_budget(lines, budget=budget, counter=counter)


def _repeats(words: set[str], postings: dict[str, list[int]]) -> bool:
    """Whether one line already holds most of `words`."""
    shared: dict[int, int] = {}
    for word in words:
        for index in postings.get(word, ()):
            shared[index] = shared.get(index, 0) + 1
    return bool(shared) and max(shared.values()) >= DUPLICATE_SHARE * len(words)


def _parse(summary: str) -> list[_Line]:
    lines = []
    for i, raw in enumerate(line for line in summary.splitlines() if line.strip()):
        match = _BULLET.match(raw.strip())
        lines.append(_Line(match[1], match[2], i) if match else _Line("", raw.rstrip(), i))
    return lines


def _sentences(messages: Sequence[Message]) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for message in messages:
        if message.role not in ("user", "assistant", "tool"):
            continue
        for piece in _SENTENCE_END.split(_BRACKETED.sub(" ", message.text)):
            sentence = _clip(piece, MAX_SENTENCE_WORDS)
            if len(sentence.split()) >= 2:
                found.append((message.role, sentence))
        for call in message.tool_calls:
            args = json.dumps(thaw(call.args), default=str, ensure_ascii=False)
            found.append(("assistant", _clip(f"called {call.tool_name} {args}", MAX_TOOL_WORDS)))
        for result in message.tool_results:
            value = result.result if isinstance(result.result, str) else json.dumps(thaw(result.result))
            failed = " (error)" if result.is_error else ""
            found.append(("tool", _clip(f"{result.tool_name}{failed}: {value}", MAX_TOOL_WORDS)))
    return found


def _clip(text: str, words: int) -> str:
    parts = text.split()
    return " ".join(parts) if len(parts) <= words else " ".join(parts[:words]) + " …"


def _words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


def _within_budget(lines: list[_Line], *, budget: int, counter: TokenCounter) -> str:
    costs = [counter.count_text(line.rendered) + 1 for line in lines]  # + the newline
    if sum(costs) > budget:
        best_first = sorted(range(len(lines)), key=lambda i: (-lines[i].score, -lines[i].order))
        kept: set[int] = set()
        used = 0
        for i in best_first:
            if used + costs[i] <= budget:
                kept.add(i)
                used += costs[i]
        lines = [line for i, line in enumerate(lines) if i in kept]
    text = "\n".join(line.rendered for line in lines)
    while lines and counter.count_text(text) > budget:  # the per-line sum is an estimate
        worst = min(range(len(lines)), key=lambda i: (lines[i].score, lines[i].order))
        lines.pop(worst)
        text = "\n".join(line.rendered for line in lines)
    return text
