"""The channels a guardrail screens, the memory items each one carries, and what happens to a flagged one.

Channels, and the hook that reaches each:

- "input": the turn's new messages (`process_input`);
- "history": messages MessageHistory loaded from this thread (`process_input`, after the memory
  processors: DESIGN §2 rule 1);
- "recall": messages SemanticRecall brought back, from this thread (in the message list) or from the
  resource's other threads (one system message whose metadata says where each one is), and the hits
  of the model's `search_memory` calls (`process_tool_result`: a flagged hit is taken out of the
  result);
- "working_memory": the working-memory system message (`process_input`), and the model's updates
  through `updateWorkingMemory` (`process_tool_result`, before the update is written);
- "tool_result": what a tool returned, before the model reads it (`process_tool_result`), and tool
  results a client sends in the input;
- "output" / "stream": the model's responses (`process_output_result` / `process_output_stream`).

On a memory channel a flagged item is never a reason to block the user's turn: it is withheld from this
prompt (a loaded message dropped, a line of the recall or working-memory message cut) and recorded for
review on the turn's saved user message (`metadata["withheld"]`: ids, channel, detector, score, never
text). On the tool-result channel the result is redacted, or replaced with a note the model reads.
Content that trips a detector on input without blocking (strategy "warn" or "rewrite") is saved with
`metadata["quarantine"]`, which the database turns into `Message.quarantined`: history and recall then
skip it in their SQL, and operators confirm or clear it in the admin.

The tool-result channel's helpers (and `search_memory` hits screened as recall) are in
memproc.guardrails._tool_channel.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from memproc.exceptions import ConfigurationError
from memproc.guardrails._text import map_text
from memproc.messages import Message, TextPart, thaw
from memproc.processors.base import ProcessorContext

CHANNELS = ("input", "history", "recall", "working_memory", "tool_result", "output", "stream")
MEMORY_CHANNELS = ("history", "recall", "working_memory")
ALIASES = {"memory": MEMORY_CHANNELS, "tool": ("tool_result",), "tool_results": ("tool_result",)}

QUARANTINE_KEY = "quarantine"
WITHHELD_KEY = "withheld"
# The statuses that keep a message out of history and recall (memproc.models.QUARANTINE_ACTIVE).
QUARANTINE_ACTIVE = ("flagged", "confirmed")

RECALL_MESSAGE_ID = "semantic-recall:other-threads"
WORKING_MEMORY_MESSAGE_ID = "working-memory"
WORKING_MEMORY_TOOL = "updateWorkingMemory"
SEARCH_NOTE = "{count} remembered message(s) withheld by a guardrail."
_WM_BLOCK = re.compile(r"<working_memory>\n?(.*?)\n?</working_memory>", re.S)


def parse(owner: str, value: Any, *, supported: Sequence[str]) -> frozenset[str]:
    """`channels=`: one name or a collection; "memory" stands for history, recall and working memory."""
    items = (value,) if isinstance(value, str) else value
    if isinstance(items, (bytes, Mapping)) or not isinstance(items, Iterable):
        raise ConfigurationError(
            f"{owner}(channels=...) must be a channel name or a list of them, not {value!r}"
        )
    names: list[str] = []
    for item in items:
        names.extend(ALIASES.get(item, (item,)) if isinstance(item, str) else (item,))
    unknown = [n for n in names if n not in supported]
    if not names or unknown:
        raise ConfigurationError(
            f"{owner}(channels=...) must name one or more of {', '.join(supported)} (or 'memory'), "
            f"not {value!r}"
        )
    return frozenset(names)


# --- memory items ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MemoryItem:
    """One thing memory put in the prompt: a loaded message, or a stretch of a system message."""

    channel: str
    holder: Message  # the message that carries it in the prompt
    text: str
    message_id: str | None = None  # the stored message it came from (None: working memory)
    thread_id: str | None = None
    span: tuple[int, int] | None = None  # where in `holder.text` (None: the whole message)
    quarantined: bool = False  # already flagged in storage (an in-memory store does not filter)


def is_quarantined(message: Message) -> bool:
    flag = message.metadata.get(QUARANTINE_KEY)
    return isinstance(flag, Mapping) and flag.get("status") in QUARANTINE_ACTIVE


def memory_items(ctx: ProcessorContext, channels: Iterable[str]) -> list[MemoryItem]:
    wanted = set(channels)
    items: list[MemoryItem] = []
    if wanted & {"history", "recall"}:
        recalled = {r.id for r in (ctx.turn.info.recalled or [] if ctx.turn else [])}
        for message in ctx.messages:
            if message.id not in ctx.loaded_ids or message.role == "system":
                continue
            channel = "recall" if message.id in recalled else "history"
            if channel in wanted:
                items.append(
                    MemoryItem(
                        channel,
                        message,
                        message.text,
                        message.id,
                        message.thread_id,
                        quarantined=is_quarantined(message),
                    )
                )
    for message in ctx.system_messages:
        if message.id == RECALL_MESSAGE_ID and "recall" in wanted:
            items.extend(_recall_lines(message))
        elif message.id == WORKING_MEMORY_MESSAGE_ID and "working_memory" in wanted:
            block = _WM_BLOCK.search(message.text)
            if block and block.group(1).strip():
                items.append(MemoryItem("working_memory", message, block.group(1), span=block.span(1)))
    return items


def _recall_lines(message: Message) -> list[MemoryItem]:
    items = []
    text = message.text
    for entry in message.metadata.get("recalled", ()):
        try:
            start, end = int(entry["start"]), int(entry["end"])
        except (KeyError, TypeError, ValueError):
            continue
        if 0 <= start < end <= len(text):
            items.append(
                MemoryItem(
                    "recall",
                    message,
                    text[start:end],
                    entry.get("id"),
                    entry.get("thread_id"),
                    span=(start, end),
                    quarantined=entry.get("quarantined", False),
                )
            )
    return items


@dataclass
class Withheld:
    """What one guardrail withheld from one prompt; applied to the message list by `apply`."""

    processor_id: str
    drop: set[str] = field(default_factory=set)  # loaded message ids
    # System message id -> span of its text -> the new text of that stretch (None: cut it).
    cuts: dict[str, dict[tuple[int, int], str | None]] = field(default_factory=dict)
    replace: dict[str, Message] = field(default_factory=dict)  # loaded message id -> new copy
    records: list[dict[str, Any]] = field(default_factory=list)

    def withhold(self, item: MemoryItem, finding: Mapping[str, Any]) -> None:
        if item.span is None:
            self.drop.add(item.holder.id)
        else:
            self.cuts.setdefault(item.holder.id, {})[item.span] = None
        self.records.append(
            {
                "channel": item.channel,
                "message_id": item.message_id,
                "thread_id": item.thread_id,
                "processor": self.processor_id,
                **{k: v for k, v in finding.items() if k in ("score", "categories", "types", "reason")},
            }
        )

    def rewrite(self, item: MemoryItem, transform: Callable[[str], str]) -> None:
        """Puts `transform`'s copy of the item in its place in this prompt (a redaction, for
        instance); a loaded message keeps its other parts."""
        if item.span is None:
            self.replace[item.holder.id] = map_text(item.holder, transform)
        else:
            self.cuts.setdefault(item.holder.id, {})[item.span] = transform(item.text)

    def __bool__(self) -> bool:
        return bool(self.drop or self.cuts or self.replace or self.records)


def apply(
    ctx: ProcessorContext, withheld: Withheld, *, note: str, messages: Sequence[Message] | None = None
) -> list[Message] | None:
    """`messages` (default ctx.messages) without what was withheld (system messages cut, with `note`
    where a cut left nothing), the records kept on the turn's last new user message for review and in
    `ctx.state["withheld"]` / `turn.info.withheld`. None when nothing changed."""
    if not withheld:
        return None
    messages = ctx.messages if messages is None else messages
    ctx.state.setdefault("withheld", []).extend(withheld.records)
    if ctx.turn is not None:
        ctx.turn.info.withheld.extend(withheld.records)
    changed_system = []
    for message in ctx.system_messages:
        changed = withheld.replace.get(message.id, message)
        if message.id in withheld.cuts:
            changed = _cut(changed, withheld.cuts[message.id], note)
        if changed is not message:
            changed_system.append(changed)
    kept = [withheld.replace.get(m.id, m) for m in messages if m.id not in withheld.drop]
    kept = _record_on_input(ctx, kept, withheld.records)
    return [*changed_system, *kept]


def _cut(message: Message, edits: dict[tuple[int, int], str | None], note: str) -> Message:
    """The system message with each edited stretch replaced (None: cut). The recall message is
    rebuilt line by line, so its `metadata["recalled"]` offsets stay true for the next guardrail;
    a working-memory block left empty, or a recall message left without lines, becomes `note`."""
    text = message.text
    if message.id == RECALL_MESSAGE_ID:
        return _rebuild_recall(message, edits, note)
    cut = [span for span, new in edits.items() if new is None]
    block = _WM_BLOCK.search(text) if message.id == WORKING_MEMORY_MESSAGE_ID else None
    new_text = _edited(text, edits)
    if block is not None and cut:
        inner = _WM_BLOCK.search(new_text)
        if inner is not None:
            data = inner.group(1).strip("\n")
            data = f"{data.rstrip()}\n{note}" if data.strip() else note
            new_text = f"{new_text[: inner.start(1)]}{data}{new_text[inner.end(1) :]}"
    metadata = {**thaw(message.metadata), "withheld": len(cut)}
    return message.replace(parts=(TextPart(new_text),), metadata=metadata)


def _rebuild_recall(message: Message, edits: dict[tuple[int, int], str | None], note: str) -> Message:
    text = message.text
    entries = [thaw(e) for e in message.metadata.get("recalled", ())]
    head_end = max(0, entries[0]["start"] - 1) if entries else len(text)
    new_text = text[:head_end]
    kept: list[dict[str, Any]] = []
    for entry in entries:
        span = (entry["start"], entry["end"])
        line = edits.get(span, text[span[0] : span[1]])
        if line is None:
            continue
        new_text += "\n"
        kept.append({**entry, "start": len(new_text), "end": len(new_text) + len(line)})
        new_text += line
    cut = sum(1 for new in edits.values() if new is None)
    if entries and not kept:
        new_text = note
    metadata = {**thaw(message.metadata), "recalled": kept, "withheld": cut}
    return message.replace(parts=(TextPart(new_text),), metadata=metadata)


def _edited(text: str, edits: dict[tuple[int, int], str | None]) -> str:
    out, cursor = [], 0
    for (start, end), new in sorted(edits.items()):
        if start < cursor:
            continue
        out.append(text[cursor:start])
        if new is None:
            end = _line_end(text, end)
        else:
            out.append(new)
        cursor = end
    out.append(text[cursor:])
    return "".join(out)


def _line_end(text: str, end: int) -> int:
    return end + 1 if end < len(text) and text[end] == "\n" else end


def _record_on_input(
    ctx: ProcessorContext, messages: list[Message], records: list[dict[str, Any]]
) -> list[Message]:
    target = next((m for m in reversed(messages) if m.id not in ctx.loaded_ids and m.role == "user"), None)
    if target is None or not records:
        return messages
    metadata = thaw(target.metadata)
    metadata[WITHHELD_KEY] = [*metadata.get(WITHHELD_KEY, []), *records]
    updated = target.replace(metadata=metadata)
    return [updated if m.id == target.id else m for m in messages]


# --- search_memory results ------------------------------------------------------------------------


# --- flags on what is saved ---------------------------------------------------------------------


def quarantined_copy(
    message: Message, *, channel: str, processor_id: str, finding: Mapping[str, Any]
) -> Message:
    """`message` with `metadata["quarantine"]`: saved with the turn, skipped by history and recall."""
    metadata = thaw(message.metadata)
    metadata[QUARANTINE_KEY] = {
        "status": "flagged",
        "channel": channel,
        "processor": processor_id,
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        **{
            k: _jsonable(v)
            for k, v in finding.items()
            if k in ("score", "categories", "types", "reason", "spans")
        },
    }
    return message.replace(metadata=metadata)


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))
