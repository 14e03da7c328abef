"""MessageHistory: loads the thread's recent messages before the input; saves the turn's new ones."""

from __future__ import annotations

from memproc.exceptions import ConfigurationError
from memproc.messages import Message, new_id
from memproc.processors.base import ProcessorContext
from memproc.processors.conversation import echoed_prefix

__all__ = ["MessageHistory", "savable"]


class MessageHistory:
    """Input: puts the thread's newest `last_messages` messages before the new input (one query;
    none on a new thread; one more when the caller sent message ids). A client that echoes the
    conversation back is not duplicated: input ids already stored in this thread are dropped from the
    input (the stored copy wins, rule 11), and so are leading input messages without ids that repeat
    the thread's newest messages (rule 17). An id stored in another thread gets a fresh id. What it
    loads is marked as memory, so the conversation object orders it and keeps tool pairs whole.

    Output: records the turn's input and responses for the turn's atomic save, without system
    messages, internal tool calls (working memory) and calls without a result. It never saves when
    `read_only`. Last on output, so it saves what the other
    processors made of the turn.
    """

    id = "message-history"

    def __init__(self, last_messages: int = 10, *, read_only: bool = False) -> None:
        if isinstance(last_messages, bool) or not isinstance(last_messages, int) or last_messages < 0:
            raise ConfigurationError("MessageHistory(last_messages=...) must be an integer >= 0")
        self.last_messages = last_messages
        self.read_only = read_only

    def process_input(self, ctx: ProcessorContext) -> list[Message] | None:
        turn, store = ctx.turn, ctx.store
        if turn is None or store is None or not ctx.thread_id:
            return None
        window = self.last_messages
        new = ctx.new_messages
        stored: list[Message] = []
        if turn.thread_exists and (window or len(new) > 1):
            # One query serves the window and the echo check (rule 17), whichever is longer.
            stored = store.messages_recent(
                thread_id=ctx.thread_id,
                limit=max(window, len(new) - 1),
                last_sequence=turn.thread_last_sequence,
            )
        history = stored[len(stored) - window :] if window else []
        echoed = {m.id for m in new[: echoed_prefix(new, stored)]}
        stored_here = {m.id for m in stored}
        elsewhere: set[str] = set()
        # Only ids the caller chose can already be stored (a client echoing the conversation back).
        unknown = [m.id for m in new if m.id in turn.client_ids and m.id not in stored_here]
        if unknown:
            for message_id, thread_id in store.messages_existing(ids=unknown).items():
                (stored_here if thread_id == ctx.thread_id else elsewhere).add(message_id)
        kept = [
            m.replace(id=new_id()) if m.id in elsewhere else m
            for m in ctx.messages
            if m.id in ctx.loaded_ids or (m.id not in stored_here and m.id not in echoed)
        ]
        ctx.mark_loaded(history)
        turn.info["history"] = [{"id": m.id, "role": m.role, "text": m.text} for m in history]
        if echoed:
            turn.info["echoed"] = len(echoed)
        if not history and len(kept) == len(ctx.messages) and not elsewhere:
            return None
        return history + kept

    def process_output_result(self, ctx: ProcessorContext) -> list[Message] | None:
        turn = ctx.turn
        if turn is None or not ctx.thread_id:
            return None
        if not self.read_only:
            turn.writes.messages = savable(
                [*ctx.input_messages, *ctx.messages], internal_tools=turn.internal_tool_names
            )
        return None


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
