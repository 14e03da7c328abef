"""PIIDetector: finds personal data (emails, phone and card numbers, IBANs, SSNs, keys and passwords, ...)
and redacts, blocks or reports it, on input, on the result and on the stream."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from typing import Any

from memproc.events import StreamEvent
from memproc.exceptions import ConfigurationError
from memproc.guardrails import (
    _channels,
    _options,
    _pii_hold,
    _pii_judge,
    _pii_options,
    _pii_patterns,
    _tool_channel,
)
from memproc.guardrails._pii_patterns import Match
from memproc.guardrails._pii_presidio import ENGINES, default_types, presidio_recognizer
from memproc.guardrails._stream import repair, stream_part
from memproc.guardrails._text import input_targets, map_text, merge_counts, plural
from memproc.messages import Message, ToolResultPart
from memproc.processors.base import ProcessorContext

__all__ = ["PIIDetector"]

logger = logging.getLogger("memproc.guardrails")

STRATEGIES = ("redact", "block", "warn")
PHASES = _pii_options.PHASES
CHANNELS = _pii_options.CHANNELS
DEFAULT_CHANNELS = _pii_options.DEFAULT_CHANNELS
WITHHELD_NOTE = _pii_options.WITHHELD_NOTE
TOOL_NOTE = _pii_options.TOOL_NOTE


class PIIDetector:
    """Detects personal data in the turn's text and redacts it, blocks the turn, or reports it.

    Reads: on input, the text parts of the turn's own new messages (`ctx.new_messages`); on output,
    the text parts of the model's responses (new assistant messages) and the streamed text deltas.
    Detection is offline: regular expressions narrowed by checksums (Luhn for cards, mod-97 and the
    country's length for IBANs, `ipaddress` for IPs) and by the words around a value (phone numbers
    in the national formats of eight countries, SSNs without dashes only after "SSN", a secret as the
    value after a password, token or secret name, e-mail addresses spelled "[at]" ... "[dot]"; see
    `memproc.guardrails._pii_patterns`), plus your own `patterns`. With `model=`, a
    judge model also looks for the types a regex cannot see (names, addresses, dates of birth); if
    it fails or answers garbage, the regex result stands and the failure is logged.

    `engine=` chooses the offline detectors: "rules" (the default, the above) or "presidio": the rules,
    plus Microsoft Presidio over a spaCy pipeline (the `presidio` extra) for what no rule claims: a
    PERSON is a "name", a LOCATION (a street, a city, a country) an "address", a date after a birth
    word ("born", "DOB") a "date_of_birth". These join the default `types` and need no `model=`;
    `threshold` is also Presidio's score threshold (a spaCy entity scores 0.85). `presidio_model=` is
    the spaCy model: a package (Presidio's default "en_core_web_lg") or a saved pipeline's directory.
    A missing extra or model is a ConfigurationError here; one that fails to load at first use is
    logged once and the rules run alone. Overlaps resolve as ever (the longest span, then a rule's
    type); on the stream the last 48 characters wait, so a name is read whole. See `_pii_presidio`.

    Changes, with strategy "redact": returns copies of the affected messages with each match
    replaced by `redaction` (a template: "[REDACTED:{type}]" gives "[REDACTED:email]"; or "mask",
    which keeps the shape and the last digits; or "hash", a stable pseudonym per value; or "" to
    remove it). Because it runs before memory saves (DESIGN §2 rules 1-2), the redacted text is
    what the model sees and what is stored. On the stream it holds back the shortest tail that
    could still grow into a match (the unfinished last word, a run of digit groups, a "password="
    awaiting its value; the last 48 characters when custom `patterns` are set), so a value split
    across deltas is still caught, and releases it once the text moves on or the step ends; see
    `memproc.guardrails._stream` for the trade-off.

    With "block" it aborts (`retry=True` asks the model for another answer when the response held
    personal data); the metadata lists the types and their counts. With "warn" it logs the types
    and counts and records them in `ctx.state["detections"]`; the text passes unchanged (on the
    stream it is checked once the result is complete).

    Channels (`channels=`; default input, tool_result, output and stream; `phases=("input",)` or
    `("output",)` is the older spelling): "tool_result" redacts what a tool returned before the model
    reads it, every string of a JSON result ("block" replaces the result with a note the model reads,
    the turn goes on); "history", "recall" and "working_memory" redact what memory put in this prompt
    (never what is stored; "block" withholds the item), recording what was found on the turn's saved
    user message (`metadata["withheld"]`, types and counts only).

    Detection reads a folded copy of the text (fullwidth digits, zero-width spaces, soft hyphens and
    non-breaking spaces inside a number folded) and maps each match back onto the original, so
    UnicodeNormalizer is not needed first and the redaction covers exactly what was typed.

    Never: puts a detected value in a log line, a reason or metadata; touches system messages the
    agent wrote, or tool calls; mutates what it is given.

    Order: in `input_processors` (its input, memory and tool-result channels run there) before
    anything that stores or forwards the text; in `output_processors` anywhere (memory processors run
    after it and save the redacted response). Note that a blocked turn's original input is kept in
    the TripwireLog unless `MEMPROC["STORE_BLOCKED_CONTENT"]` is False.
    """

    id = "pii-detector"
    stream_hold_chars = 48
    stream_max_word = 256

    def __init__(
        self,
        *,
        types: Iterable[str] | None = None,
        strategy: str = "redact",
        redaction: str = "[REDACTED:{type}]",
        phases: str | Iterable[str] | None = None,
        channels: Any = None,
        patterns: Mapping[str, str | re.Pattern[str]] | None = None,
        model: Any = None,
        threshold: float = 0.6,
        retry: bool = False,
        engine: str = "rules",
        presidio_model: Any = None,
    ) -> None:
        owner = "PIIDetector"
        self.engine = _options.choice(owner, "engine", engine, ENGINES)
        self.strategy = _options.choice(owner, "strategy", strategy, STRATEGIES)
        self.channels = _pii_options.channels(owner, channels, phases)
        self.phases = _pii_options.phases_of(self.channels)
        self.model = _options.model(owner, model)
        self.threshold = _options.unit_interval(owner, "threshold", threshold)
        self.retry = _options.boolean(owner, "retry", retry)
        self.redaction = _pii_options.redaction(redaction)
        known = (*_pii_patterns.TYPES, *_pii_patterns.MODEL_ONLY_TYPES)
        types = default_types(self.engine) if types is None else types
        chosen = tuple(_pii_patterns.ALIASES.get(t, t) for t in _options.names(owner, "types", types))
        _options.names(owner, "types", chosen, known=known)
        self.presidio = presidio_recognizer(
            owner, engine=self.engine, model=presidio_model, types=chosen, threshold=self.threshold
        )
        needs_model = [t for t in chosen if t in _pii_patterns.MODEL_ONLY_TYPES]
        if needs_model and self.model is None and self.presidio is None:
            raise ConfigurationError(
                f"PIIDetector(types=...) {', '.join(needs_model)} can only be found by a judge model or "
                "Presidio; pass model='provider/model' or engine='presidio', or leave them out"
            )
        self.detectors = {t: _pii_patterns.DETECTORS[t] for t in chosen if t in _pii_patterns.DETECTORS}
        self.detectors.update(_pii_options.custom_detectors(patterns, known=known))
        self.types = (*chosen, *(patterns or {}))
        self.custom_patterns = tuple(patterns or {})

    @property
    def needs_stream_policy(self) -> str:
        """The stream policy under which a blocked response never reaches the client
        (memproc.turns.stream_policy). The stream hook holds back every match until it is judged, so
        "live" releases none; only the judge model, asked on the whole result, can find what the
        stream did not: blocking on its verdict needs "hold". So does Presidio's, which reads the
        whole result there and a window of it on the stream."""
        whole_result_finds_more = self.model is not None or self.presidio is not None
        if self.strategy == "block" and whole_result_finds_more and "output" in self.channels:
            return "hold"
        return "live"

    # --- detection -----------------------------------------------------------------------------

    def detect(self, text: str, *, use_model: bool = False) -> list[Match]:
        """Non-overlapping matches in text order (the rules, Presidio with engine="presidio", and the
        judge if asked)."""
        return self._detect(text, use_model=use_model)[0]

    def replacement(self, value: str, kind: str) -> str:
        if self.redaction == "mask":
            return _pii_patterns.mask(value, kind)
        if self.redaction == "hash":
            return _pii_patterns.hashed(value, kind)
        return self.redaction.format(type=kind)

    def redact(self, text: str, matches: Iterable[Match]) -> str:
        out: list[str] = []
        cursor = 0
        for match in matches:
            out.append(text[cursor : match.start])
            out.append(self.replacement(text[match.start : match.end], match.type))
            cursor = match.end
        out.append(text[cursor:])
        return "".join(out)

    # --- hooks ---------------------------------------------------------------------------------

    def process_input(self, ctx: ProcessorContext) -> list[Message] | None:
        messages = list(ctx.messages)
        changed = False
        if "input" in self.channels:
            scanned = self._scan(ctx, messages, input_targets(ctx), where="input")
            messages, changed = (scanned, True) if scanned is not None else (messages, changed)
        if "tool_result" in self.channels:
            replaced = self._input_tool_results(ctx, messages)
            messages, changed = (replaced, True) if replaced is not None else (messages, changed)
        withheld = self._screen_memory(ctx)
        if withheld:
            return _channels.apply(ctx, withheld, messages=messages, note=WITHHELD_NOTE)
        return messages if changed else None

    def process_tool_result(self, ctx: ProcessorContext, result: ToolResultPart) -> ToolResultPart | None:
        if _tool_channel.is_search_result(result, self.channels):  # remembered messages: recall's rules
            return _tool_channel.apply_to_search(
                ctx, result, self._screen_memory(ctx, _tool_channel.search_items(result))
            )
        if "tool_result" not in self.channels:
            return None
        counts: dict[str, int] = {}

        def handle(text: str) -> str:
            matches = self.detect(text)
            merge_counts(counts, _counts(matches).items())
            return self.redact(text, matches) if matches and self.strategy == "redact" else text

        redacted = _tool_channel.map_result(result, handle)
        if not counts:
            return None
        self._record(ctx, "tool_result", counts)
        if ctx.turn is not None:
            ctx.turn.info.withheld.append(
                {
                    "channel": "tool_result",
                    "processor": self.id,
                    "types": sorted(counts),
                    "tool_name": result.tool_name,
                    "tool_call_id": result.tool_call_id,
                }
            )
        if self.strategy == "warn":
            logger.warning("memproc: %s found personal data in a tool result: %s", self.id, plural(counts))
            return None
        if self.strategy == "block":
            return _tool_channel.replaced_result(result, TOOL_NOTE.format(found=plural(counts)))
        return redacted

    def process_output_result(self, ctx: ProcessorContext) -> list[Message] | None:
        if "output" not in self.channels:
            return None
        before = list(ctx.messages)
        messages = repair(self, ctx, before)
        targets = [m for m in messages if m.id not in ctx.loaded_ids and m.role == "assistant"]
        result = self._scan(ctx, messages, targets, where="response")
        if result is None and messages is not before:
            return messages
        return result

    def process_output_stream(
        self, ctx: ProcessorContext, part: StreamEvent
    ) -> StreamEvent | list[StreamEvent] | None:
        if "stream" not in self.channels or self.strategy == "warn":
            return part  # warn: the whole response is checked once, in process_output_result
        return stream_part(self, ctx, part)

    # --- the stream guard (see memproc.guardrails._stream) -------------------------------------

    def release(self, ctx: ProcessorContext, pending: str) -> tuple[str, str]:
        matches, found_by = self._detect(pending, use_model=False)
        hold = _pii_hold.hold_start(
            pending,
            matches,
            hold_chars=self.stream_hold_chars,
            max_word=self.stream_max_word,
            # A name or a place, like a custom pattern, has no shape to wait for: hold the last 48.
            custom_patterns=bool(self.custom_patterns) or self.presidio is not None,
        )
        done = [m for m in matches if m.end <= hold]
        self._act_on_stream(ctx, done, found_by[: len(done)])  # matches are in text order
        return self.redact(pending[:hold], done), pending[hold:]

    def flush(self, ctx: ProcessorContext, pending: str) -> str:
        matches, found_by = self._detect(pending, use_model=False)
        self._act_on_stream(ctx, matches, found_by)
        return self.redact(pending, matches)

    def _act_on_stream(self, ctx: ProcessorContext, matches: list[Match], found_by: list[str]) -> None:
        if not matches:
            return
        counts = _counts(matches)
        self._record(ctx, "stream", counts)
        if self.strategy == "block":
            self._abort(ctx, "response", counts, source="+".join(sorted(set(found_by))))

    # --- channels ------------------------------------------------------------------------------

    def _input_tool_results(self, ctx: ProcessorContext, messages: list[Message]) -> list[Message] | None:
        """Tool results a client sent in the input, like results of the turn's own tools."""
        replaced = {}
        for message in messages:
            if message.id in ctx.loaded_ids or message.role != "tool":
                continue
            parts = tuple(
                (self.process_tool_result(ctx, p) or p) if isinstance(p, ToolResultPart) else p
                for p in message.parts
            )
            if parts != message.parts:
                replaced[message.id] = message.replace(parts=parts)
        return [replaced.get(m.id, m) for m in messages] if replaced else None

    def _screen_memory(
        self, ctx: ProcessorContext, items: list[_channels.MemoryItem] | None = None
    ) -> _channels.Withheld:
        """What memory put in this prompt (or `items`: a search's hits), redacted in the prompt's copy
        (or withheld, with "block")."""
        withheld = _channels.Withheld(self.id)
        if items is None:
            items = _channels.memory_items(ctx, self.channels & set(_channels.MEMORY_CHANNELS))
        for item in items:
            matches = self.detect(item.text)
            if not matches:
                continue
            counts = _counts(matches)
            self._record(ctx, item.channel, counts)
            if self.strategy == "warn":
                continue
            finding = {"types": sorted(counts)}
            if self.strategy == "block":
                withheld.withhold(item, finding)
                continue
            withheld.rewrite(item, lambda text: self.redact(text, self.detect(text)))
            withheld.records.append(
                {
                    "channel": item.channel,
                    "message_id": item.message_id,
                    "thread_id": item.thread_id,
                    "processor": self.id,
                    "action": "redacted",
                    **finding,
                }
            )
        return withheld

    # --- internals -----------------------------------------------------------------------------

    def _detect(self, text: str, *, use_model: bool) -> tuple[list[Match], list[str]]:
        """The matches, and which detector ("regex", "presidio", "model") found each."""
        judged = (
            _pii_judge.model_matches(
                text, model=self.model, types=self.types, threshold=self.threshold, owner=self.id
            )
            if use_model and self.model is not None
            else []
        )
        recognised = self.presidio.matches(text) if self.presidio is not None else []
        matches = _pii_patterns.find(text, self.detectors, [*judged, *recognised])
        from_model, from_presidio = set(judged), set(recognised)
        return matches, [
            "model" if m in from_model else "presidio" if m in from_presidio else "regex" for m in matches
        ]

    def _scan(
        self, ctx: ProcessorContext, messages: list[Message], targets: list[Message], *, where: str
    ) -> list[Message] | None:
        counts: dict[str, int] = {}
        sources: set[str] = set()
        replaced: dict[str, Message] = {}

        def handle(text: str) -> str:
            matches, found_by = self._detect(text, use_model=True)
            if not matches:
                return text
            sources.update(found_by)
            merge_counts(counts, _counts(matches).items())
            return self.redact(text, matches) if self.strategy == "redact" else text

        for message in targets:
            changed = map_text(message, handle)
            if changed is not message:
                replaced[message.id] = changed
        if not counts:
            return None
        self._record(ctx, ctx.phase, counts)
        if self.strategy == "block":
            self._abort(ctx, where, counts, source="+".join(sorted(sources)))
        if self.strategy == "warn":
            logger.warning("memproc: %s found personal data in the %s: %s", self.id, where, plural(counts))
            return None
        return [replaced.get(m.id, m) for m in messages] if replaced else None

    def _record(self, ctx: ProcessorContext, phase: str, counts: dict[str, int]) -> None:
        ctx.state.setdefault("detections", []).append(
            {"phase": phase, "strategy": self.strategy, "counts": dict(counts)}
        )

    def _abort(self, ctx: ProcessorContext, where: str, counts: dict[str, int], *, source: str) -> None:
        ctx.abort(
            f"Personal data detected in the {where}: {plural(counts)}.",
            retry=self.retry and ctx.phase == "output",
            metadata={"types": sorted(counts), "counts": dict(counts), "source": source},
        )

    def __repr__(self) -> str:
        engine = f", engine={self.engine!r}" if self.engine != "rules" else ""
        return (
            f"PIIDetector(types={list(self.types)!r}, strategy={self.strategy!r}, "
            f"channels={sorted(self.channels)!r}{engine})"
        )


def _counts(matches: Iterable[Match]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for match in matches:
        counts[match.type] = counts.get(match.type, 0) + 1
    return counts
