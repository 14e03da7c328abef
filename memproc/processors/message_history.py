"""MessageHistory: loads the thread's recent messages before the input; saves the turn's new ones."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from memproc.exceptions import ConfigurationError, MessageConflict
from memproc.messages import Message, thaw
from memproc.processors.base import ProcessorContext
from memproc.processors.compaction import CompactionDue, CompactionOptions, fold_due, summary_message
from memproc.processors.conversation import echoed_prefix
from memproc.processors.store import ThreadSummaryValue
from memproc.processors.token_limiter import tool_call_groups
from memproc.processors.tokens import TokenCounter, check_counter_spec, get_token_counter
from memproc.processors.turn import Turn
from memproc.processors.turn_info import HistoryEntry, SummaryUsed

__all__ = ["MessageHistory", "newest_within", "savable"]


class MessageHistory:
    """Input: puts the thread's newest `last_messages` messages before the new input (one query;
    none on a new thread; one more when the caller sent message ids). A client that echoes the
    conversation back is not duplicated: input ids already stored in this thread are dropped from the
    input (the stored copy wins, rule 11), and so are leading input messages without ids that repeat
    the thread's newest messages (rule 17). An id the caller chose that is stored in another thread of
    its resource is a MessageConflict, as the API's 409 says before the turn. What it
    loads is marked as memory, so the conversation object orders it and keeps tool pairs whole.

    With `history_tokens`, the window is also a token budget (counted with `counter`, default the
    TOKENIZER setting): the newest messages that fit, whole tool call/result pairs only, oldest
    dropped first; a pair whose result is in the new input is kept, and the new input is never
    dropped (it is not counted against the budget).

    With `compaction`, the thread's summary (read with the turn's first thread read by the Django
    store: no query) enters as one system message, and messages it covers are not loaded again.
    When the messages between the summary and the window are estimated at `trigger_tokens` or more,
    the turn asks for a fold (`turn.writes.compaction`), which the turn's commit enqueues; the
    compaction service runs it after the turn commits.

    Output: records the turn's input and responses for the turn's atomic save, without system
    messages, internal tool calls (working memory) and calls without a result. It never saves when
    `read_only`. Last on output, so it saves what the other
    processors made of the turn.
    """

    id = "message-history"

    def __init__(
        self,
        last_messages: int = 10,
        *,
        history_tokens: int | None = None,
        compaction: CompactionOptions | Mapping[str, Any] | None = None,
        counter: TokenCounter | str | Mapping[str, Any] | type | None = None,
        read_only: bool = False,
    ) -> None:
        if isinstance(last_messages, bool) or not isinstance(last_messages, int) or last_messages < 0:
            raise ConfigurationError("MessageHistory(last_messages=...) must be an integer >= 0")
        if history_tokens is not None and (
            isinstance(history_tokens, bool) or not isinstance(history_tokens, int) or history_tokens <= 0
        ):
            raise ConfigurationError("MessageHistory(history_tokens=...) must be a positive integer or None")
        check_counter_spec(counter, owner="MessageHistory")
        self.last_messages = last_messages
        self.history_tokens = history_tokens
        self.compaction = CompactionOptions.of(compaction)
        self.counter = counter
        self.read_only = read_only

    def get_counter(self) -> TokenCounter:
        return get_token_counter(self.counter)

    def process_input(self, ctx: ProcessorContext) -> list[Message] | None:
        turn, store = ctx.turn, ctx.store
        if turn is None or store is None or not ctx.thread_id:
            return None
        window = self.last_messages
        new = ctx.new_messages
        summary = self._summary(ctx) if self.compaction is not None and turn.thread_exists else None
        stored: list[Message] = []
        if turn.thread_exists and (window or len(new) > 1):
            # One query serves the window and the echo check (rule 17), whichever is longer.
            stored = store.messages_recent(
                thread_id=ctx.thread_id,
                resource_id=ctx.resource_id,
                limit=max(window, len(new) - 1),
                last_sequence=turn.thread_last_sequence,
            )
        # The newest min(window, stored): `stored` may hold more (the echo check reads further back).
        history = stored[max(0, len(stored) - window) :] if window else []
        # A message a guardrail quarantined is read (the echo check below needs it) but never loaded.
        history = [m for m in history if not _quarantined(m)]
        if summary is not None:  # what the summary covers is not history any more
            history = [m for m in history if (m.sequence or 0) > summary.covered_sequence]
        echoed = {m.id for m in new[: echoed_prefix(new, stored)]}
        stored_here = {m.id for m in stored}
        elsewhere: set[str] = set()
        # Only ids the caller chose can already be stored (a client echoing the conversation back).
        unknown = [m.id for m in new if m.id in turn.client_ids and m.id not in stored_here]
        if unknown:
            here = (ctx.resource_id or "", ctx.thread_id)
            found = store.messages_existing(ids=unknown, resource_id=here[0])
            for message_id, (resource_id, thread_id) in found.items():
                same = thread_id == ctx.thread_id and resource_id in (here[0], "")
                (stored_here if same else elsewhere).add(message_id)
        if elsewhere:  # the API's policy (its check answers 409 before the turn): one for both
            raise MessageConflict.in_use(elsewhere)
        kept = [
            m
            for m in ctx.messages
            if m.id in ctx.loaded_ids or (m.id not in stored_here and m.id not in echoed)
        ]
        if self.history_tokens is not None and history:
            fresh = [m for m in kept if m.id not in ctx.loaded_ids]
            history = newest_within(history, fresh, budget=self.history_tokens, counter=self.get_counter())
        ctx.mark_loaded(history)
        turn.info.history = [HistoryEntry(m.id, m.role, m.text) for m in history]
        if echoed:
            turn.info.echoed = len(echoed)
        extra: list[Message] = []
        if self.compaction is not None:
            self._note_window(ctx, summary, history, kept)
            if summary is not None and summary.text.strip():
                extra = [summary_message(summary)]
                turn.info.summary = SummaryUsed(summary.covered_sequence, summary.version)
        if not history and not extra and len(kept) == len(ctx.messages) and not elsewhere:
            return None
        return history + kept + extra

    def _summary(self, ctx: ProcessorContext) -> ThreadSummaryValue | None:
        read = getattr(ctx.store, "thread_summary", None)  # optional in the store protocol
        return read(thread_id=ctx.thread_id, resource_id=ctx.resource_id) if read is not None else None

    def _note_window(
        self,
        ctx: ProcessorContext,
        summary: ThreadSummaryValue | None,
        history: Sequence[Message],
        kept: Sequence[Message],
    ) -> None:
        """Keeps what the output hook needs to tell whether a fold is due: no query, no count of
        anything outside the window."""
        turn = ctx.turn
        assert turn is not None
        last = turn.thread_last_sequence
        if last is None:  # a new thread: nothing lies outside the window
            return
        sequences = [m.sequence for m in history if m.sequence is not None]
        counter = self.get_counter()
        sample = history or [m for m in kept if m.id not in ctx.loaded_ids]
        ctx.state["compaction"] = {
            "covered": summary.covered_sequence if summary is not None else 0,
            "counted_through": summary.counted_through if summary is not None else 0,
            "counted_tokens": summary.counted_tokens if summary is not None else 0,
            "window_start": min(sequences) if sequences else last + 1,
            "sample_tokens": [counter.count_message(m) for m in sample],
        }

    def process_output_result(self, ctx: ProcessorContext) -> list[Message] | None:
        turn = ctx.turn
        if turn is None or not ctx.thread_id:
            return None
        if not self.read_only:
            turn.writes.messages = savable(
                [*with_withheld(ctx.input_messages, turn.writes.withheld), *ctx.messages],
                internal_tools=turn.internal_tool_names,
            )
            if self.compaction is not None:
                self._note_due_fold(ctx, self.compaction, turn)
        return None

    def _note_due_fold(self, ctx: ProcessorContext, options: CompactionOptions, turn: Turn) -> None:
        """Asks for a fold (run after commit by the compaction service) when one is due."""
        window = ctx.state.get("compaction")
        if not window:  # the input hook read no window (a new thread)
            return
        due = fold_due(
            covered=window["covered"],
            window_start=window["window_start"],
            sample_tokens=window["sample_tokens"],
            trigger_tokens=options.trigger_tokens,
            counted_through=window["counted_through"],
            counted_tokens=window["counted_tokens"],
        )
        if due is None:
            return
        through, estimate = due
        turn.writes.compaction = CompactionDue(
            through_sequence=through,
            estimated_tokens=estimate,
            trigger_tokens=options.trigger_tokens,
            keep_tokens=options.keep_tokens,
            model=options.model,
            agent_model=_model_id(ctx.agent),
        )


def _model_id(agent: Any) -> str | None:
    """The agent's model as a string a worker can resolve; None for the DEFAULT_MODEL."""
    model_id = getattr(agent, "model_id", None)
    return None if model_id in (None, "", "default") else model_id


def _quarantined(message: Message) -> bool:
    """A guardrail's flag on a stored message (memproc.guardrails; `Message.quarantined` in the
    database says the same): "flagged" or "confirmed" until an operator clears it."""
    flag = message.metadata.get("quarantine")
    return isinstance(flag, Mapping) and flag.get("status") in ("flagged", "confirmed")


def savable(messages: list[Message], *, internal_tools: set[str]) -> list[Message]:
    """Drops system messages, internal tool calls and their results, and calls that have no result."""
    answered = {r.tool_call_id for m in messages for r in m.tool_results}
    kept: list[Message] = []
    for message in messages:
        if message.role == "system":
            continue
        parts = tuple(
            p
            for p in message.parts
            if getattr(p, "tool_name", None) not in internal_tools
            and not (p.type == "tool-call" and p.tool_call_id not in answered)
        )
        if not parts:
            continue
        kept.append(message if parts == message.parts else message.replace(parts=parts))
    return kept


def newest_within(
    history: Sequence[Message], new: Sequence[Message], *, budget: int, counter: TokenCounter
) -> list[Message]:
    """The newest messages of `history` within `budget` tokens, in order, as whole tool call groups
    (a call with its results). A group that reaches into `new` (the turn's input answers a stored
    call) is kept whatever it costs, and counted first; groups left incomplete by the window's
    edge are dropped. Stops at the first group that does not fit, so what it keeps is the newest
    run of history, never a newer and an older part with a gap between them."""
    messages = [*history, *new]
    n = len(history)
    kept: set[int] = set()
    used = 0
    candidates: list[list[int]] = []
    for group in tool_call_groups(messages):
        if group[-1] >= n:  # touches the new input
            pinned = [i for i in group if i < n]
            kept.update(pinned)
            used += sum(counter.count_message(messages[i]) for i in pinned)
        elif _whole(messages, group):
            candidates.append(group)
    for group in reversed(candidates):  # newest first
        cost = sum(counter.count_message(messages[i]) for i in group)
        if used + cost > budget:
            break
        used += cost
        kept.update(group)
    return [m for i, m in enumerate(history) if i in kept]


def _whole(messages: Sequence[Message], group: Sequence[int]) -> bool:
    calls = {c.tool_call_id for i in group for c in messages[i].tool_calls}
    results = {r.tool_call_id for i in group for r in messages[i].tool_results}
    return calls == results


def with_withheld(messages: Sequence[Message], records: list[dict[str, Any]]) -> list[Message]:
    """`messages` (the turn's input) with `records` added to the last user message's
    `metadata["withheld"]`, where an operator reviews what guardrails kept from the model."""
    target = next((m for m in reversed(messages) if m.role == "user"), None)
    if target is None or not records:
        return list(messages)
    metadata = thaw(target.metadata)
    metadata["withheld"] = [*metadata.get("withheld", []), *records]
    updated = target.replace(metadata=metadata)
    return [updated if m is target else m for m in messages]
