"""ToolCallFilter: keeps past tool calls and their results out of the prompt."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from memproc.exceptions import ConfigurationError
from memproc.messages import Message, ToolCallPart, ToolResultPart
from memproc.processors.base import ProcessorContext

__all__ = ["ToolCallFilter"]


class ToolCallFilter:
    """Removes past tool calls and their results from the prompt.

    Reads: `ctx.messages` and `ctx.loaded_ids` (which messages memory loaded).

    Changes: in the history memory loaded, drops the tool-call parts of every tool (`exclude=None`)
    or of the named tools, together with the tool-result parts answering them, so a call never
    stays without its result or the reverse. An assistant message that also had text keeps its
    text; a message left with no parts is dropped. Returns a new list, or None when nothing changed.

    Never: touches the turn's own new messages, or a past call whose result is in them (a client
    answering a tool call in this turn); changes what is stored (it only shapes this prompt);
    mutates what it is given.

    Order: anywhere in `input_processors` (memory processors always run first); before
    TokenLimiter, so the budget is measured on what remains.
    """

    id = "tool-call-filter"

    def __init__(self, *, exclude: Iterable[str] | None = None) -> None:
        if exclude is None:
            self.exclude: frozenset[str] | None = None
            return
        if isinstance(exclude, (str, bytes)) or not isinstance(exclude, Iterable):
            raise ConfigurationError(
                f"ToolCallFilter(exclude=...) must be a list of tool names, not {exclude!r}"
            )
        names = tuple(exclude)
        if not all(isinstance(name, str) and name for name in names):
            raise ConfigurationError("ToolCallFilter(exclude=...) must hold non-empty tool names")
        self.exclude = frozenset(names)

    def process_input(self, ctx: ProcessorContext) -> list[Message] | None:
        loaded = ctx.loaded_ids
        if not loaded or self.exclude == frozenset():
            return None
        protected = {
            part.tool_call_id
            for message in ctx.messages
            if message.id not in loaded
            for part in message.parts
            if isinstance(part, (ToolCallPart, ToolResultPart)) and part.tool_call_id
        }
        removed = {
            part.tool_call_id
            for message in ctx.messages
            if message.id in loaded
            for part in message.parts
            if isinstance(part, (ToolCallPart, ToolResultPart)) and part.tool_call_id and self._matches(part)
        } - protected

        changed = False
        result: list[Message] = []
        for message in ctx.messages:
            if message.id not in loaded:
                result.append(message)
                continue
            parts = tuple(part for part in message.parts if not self._removes(part, removed))
            if len(parts) == len(message.parts):
                result.append(message)
                continue
            changed = True
            if parts:
                result.append(message.replace(parts=parts))
        return result if changed else None

    def _matches(self, part: Any) -> bool:
        return self.exclude is None or part.tool_name in self.exclude

    def _removes(self, part: Any, removed: set[str]) -> bool:
        if not isinstance(part, (ToolCallPart, ToolResultPart)):
            return False
        if part.tool_call_id:
            return part.tool_call_id in removed
        return self._matches(part)  # no id to pair by: decide by name alone

    def __repr__(self) -> str:
        names = "all tools" if self.exclude is None else ", ".join(sorted(self.exclude)) or "no tools"
        return f"<ToolCallFilter: {names}>"
