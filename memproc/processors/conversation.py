"""The conversation object: the one place that owns what a valid prompt is (DESIGN §2 rules 16-17).

Processors return message lists freely (hand-placed history, recall, a limiter, guardrails, in any
order); the runner passes every list through `Conversation.apply`, and builds every model request
with `Conversation.request_messages`, so these invariants hold whatever the processors did:

- no two messages share an id (the first copy is kept);
- system messages come first; the rest are in time order, memory (history, recall) before the
  turn's new input, which keeps the order the caller gave it;
- every tool result follows, directly, the assistant message holding its call, and every call is
  followed by its result: a pair that memory loaded incomplete is dropped whole (the call part and
  the result part; a message left empty goes). The turn's own input is never dropped.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from memproc.messages import Message, ToolCallPart, ToolResultPart

__all__ = [
    "Conversation",
    "echoed_prefix",
    "order_messages",
    "unanswered_calls",
    "unique_by_id",
    "whole_tool_pairs",
]


class Conversation:
    """One turn's prompt: system messages, then memory and input (ordered), then this turn's responses.

    `loaded_ids` is shared with the turn: memory processors mark what they load through it, and it
    tells memory apart from the turn's new input.
    """

    def __init__(
        self, *, system: Sequence[Message], messages: Sequence[Message], loaded_ids: set[str]
    ) -> None:
        self.loaded_ids = loaded_ids
        self.system: list[Message] = unique_by_id(system)
        self.messages: list[Message] = order_messages(messages, loaded_ids=loaded_ids)

    @property
    def new_input(self) -> list[Message]:
        """The turn's own new (non-system) input, as the processors left it."""
        return [m for m in self.messages if m.id not in self.loaded_ids]

    def apply(self, result: Iterable[Message]) -> None:
        """Takes a processor's returned list: system messages join `system` (same id: replaced in
        place), the rest become the new message list, ordered."""
        self.system, self.messages = merge_result(result, self.system, loaded_ids=self.loaded_ids)

    def request_messages(
        self,
        *,
        system: Sequence[Message] | None = None,
        messages: Sequence[Message] | None = None,
        responses: Sequence[Message] = (),
    ) -> list[Message]:
        """What the model receives: system first, then a valid conversation. `system` and `messages`
        override the turn's for one call (a step hook's change)."""
        # `self.messages` is kept ordered by `apply`; only a step hook's own list needs ordering.
        body = self.messages if messages is None else order_messages(messages, loaded_ids=self.loaded_ids)
        protected = {m.id for m in self.messages if m.id not in self.loaded_ids}
        head = unique_by_id(self.system if system is None else system)
        return [*head, *whole_tool_pairs(unique_by_id([*body, *responses]), protected=protected)]


def merge_result(
    result: Iterable[Message], system: Sequence[Message], *, loaded_ids: set[str]
) -> tuple[list[Message], list[Message]]:
    new_system = list(system)
    rest: list[Message] = []
    for item in result:
        if item.role != "system":
            rest.append(item)
            continue
        ids = [s.id for s in new_system]
        if item.id in ids:
            new_system[ids.index(item.id)] = item
        else:
            new_system.append(item)
    return new_system, order_messages(rest, loaded_ids=loaded_ids)


def order_messages(messages: Iterable[Message], *, loaded_ids: set[str] | frozenset[str]) -> list[Message]:
    """Unique ids; what memory loaded, in time order (ties: by stored sequence, else as given), then
    the new input."""
    unique = unique_by_id(m for m in messages if m.role != "system")
    memory = [m for m in unique if m.id in loaded_ids]
    memory.sort(key=_time_key)
    return [*memory, *(m for m in unique if m.id not in loaded_ids)]


def _time_key(message: Message) -> tuple[float, int]:
    """Time, then the stored sequence: one turn's messages share a timestamp but not a sequence."""
    when = message.created_at.timestamp() if message.created_at else float("-inf")
    return (when, message.sequence if message.sequence is not None else -1)


def unique_by_id(messages: Iterable[Message]) -> list[Message]:
    seen: set[str] = set()
    kept: list[Message] = []
    for message in messages:
        if message.id not in seen:
            seen.add(message.id)
            kept.append(message)
    return kept


def whole_tool_pairs(messages: Sequence[Message], *, protected: set[str]) -> list[Message]:
    """Drops the call and result parts of every incomplete pair: a call not answered by the tool
    messages that directly follow its assistant message, or a result that does not answer the
    assistant message directly before its run of tool messages. `protected` messages (the turn's own
    input) are never changed."""
    kept: list[Message] = []
    i, n = 0, len(messages)
    while i < n:
        message = messages[i]
        if message.role == "tool":  # a run of tool messages with no assistant call before it
            end = _tool_run_end(messages, i)
            kept += _keep_results(messages[i:end], answered=set(), protected=protected)
            i = end
            continue
        if message.role != "assistant" or not message.tool_calls:
            kept.append(message)
            i += 1
            continue
        end = _tool_run_end(messages, i + 1)
        run = messages[i + 1 : end]
        results = {r.tool_call_id for m in run for r in m.tool_results}
        calls = {c.tool_call_id for c in message.tool_calls}
        if message.id in protected:
            answered = calls
            kept.append(message)
        else:
            answered = calls & results
            kept += _keep_paired(message, ToolCallPart, answered)
        kept += _keep_results(run, answered=answered, protected=protected)
        i = end
    return kept


def unanswered_calls(messages: Sequence[Message]) -> dict[int, list[str]]:
    """The tool calls no result answers in the tool messages directly after their assistant message,
    by that message's index. Sent to a provider, such a call is refused (a 400 there)."""
    found: dict[int, list[str]] = {}
    for index, message in enumerate(messages):
        if message.role != "assistant" or not message.tool_calls:
            continue
        run = messages[index + 1 : _tool_run_end(messages, index + 1)]
        answered = {r.tool_call_id for m in run for r in m.tool_results}
        missing = [c.tool_call_id for c in message.tool_calls if c.tool_call_id not in answered]
        if missing:
            found[index] = missing
    return found


def _tool_run_end(messages: Sequence[Message], start: int) -> int:
    end = start
    while end < len(messages) and messages[end].role == "tool":
        end += 1
    return end


def _keep_results(run: Sequence[Message], *, answered: set[str], protected: set[str]) -> list[Message]:
    kept: list[Message] = []
    for message in run:
        if message.id in protected:
            kept.append(message)
        else:
            kept += _keep_paired(message, ToolResultPart, answered)
    return kept


def _keep_paired(message: Message, kind: type, answered: set[str]) -> list[Message]:
    """`message` without its parts of `kind` whose call id is not in `answered` (empty: dropped)."""
    parts = tuple(p for p in message.parts if not (isinstance(p, kind) and p.tool_call_id not in answered))
    if len(parts) == len(message.parts):
        return [message]
    return [message.replace(parts=parts)] if parts else []


def echoed_prefix(inputs: Sequence[Message], stored: Sequence[Message]) -> int:
    """Rule 17: how many leading `inputs` repeat the thread's newest `stored` messages (same role,
    text and tool-call ids), the way a client that resends the whole conversation without ids does.
    The last input message is always new."""
    for k in range(min(len(inputs) - 1, len(stored)), 0, -1):
        if all(_same(a, b) for a, b in zip(inputs[:k], stored[-k:], strict=True)):
            return k
    return 0


def _same(a: Message, b: Message) -> bool:
    return (
        a.role == b.role
        and a.text.strip() == b.text.strip()
        and [c.tool_call_id for c in a.tool_calls] == [c.tool_call_id for c in b.tool_calls]
        and [r.tool_call_id for r in a.tool_results] == [r.tool_call_id for r in b.tool_results]
    )
