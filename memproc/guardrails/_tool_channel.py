"""The tool-result channel of a guardrail: the strings a tool returned, read and rewritten leaf by
leaf; the hits of the model's `search_memory` calls, screened as recall (memproc.guardrails._channels
says what each channel is); and the working-memory update a flagged call would have written."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from memproc.guardrails._channels import SEARCH_NOTE, MemoryItem, Withheld
from memproc.messages import Message, ToolResultPart, thaw
from memproc.processors.base import ProcessorContext
from memproc.tools import SEARCH_MEMORY_TOOL

# --- search_memory results ------------------------------------------------------------------------


def is_search_result(result: ToolResultPart, channels: Iterable[str]) -> bool:
    """A `search_memory` result a guardrail screening the recall channel must screen as recall."""
    return result.tool_name == SEARCH_MEMORY_TOOL and "recall" in channels and not result.is_error


def search_items(result: ToolResultPart) -> list[MemoryItem]:
    """The hits of a `search_memory` result, one recall item each (its holder stands for the hit)."""
    value = result.result
    if result.is_error or not isinstance(value, Mapping):
        return []
    items = []
    for hit in value.get("results", ()):
        if isinstance(hit, Mapping) and isinstance(hit.get("text"), str) and hit.get("id"):
            holder = Message.create("tool", hit["text"], id=str(hit["id"]))
            items.append(MemoryItem("recall", holder, hit["text"], holder.id, hit.get("thread_id")))
    return items


def apply_to_search(
    ctx: ProcessorContext, result: ToolResultPart, withheld: Withheld
) -> ToolResultPart | None:
    """The search result without the hits `withheld` withholds (a redacted hit rewritten), and how
    many were withheld; the records kept as recall's are (`ctx.state["withheld"]`,
    `turn.info.withheld`, the saved user message's `metadata["withheld"]`) and the hits marked on
    the turn's search record. None when nothing changed."""
    if not withheld:
        return None
    records = [{**r, "tool_call_id": result.tool_call_id} for r in withheld.records]
    ctx.state.setdefault("withheld", []).extend(records)
    value = thaw(result.result)
    hits, kept = value.get("results", []), []
    for hit in hits:
        hit_id = str(hit.get("id"))
        if hit_id in withheld.drop:
            continue
        if hit_id in withheld.replace:
            hit = {**hit, "text": withheld.replace[hit_id].text}
        kept.append(hit)
    dropped = [str(h.get("id")) for h in hits if str(h.get("id")) in withheld.drop]
    if ctx.turn is not None:
        ctx.turn.info.withheld.extend(records)
        ctx.turn.writes.withheld.extend(records)  # on the saved user message, as recall's
        ctx.turn.info.search_withheld(dropped)
    value["results"] = kept
    if dropped:
        value["withheld"] = value.get("withheld", 0) + len(dropped)
        value["note"] = f"{value.get('note', '')} {SEARCH_NOTE.format(count=value['withheld'])}".strip()
    return ToolResultPart(result.tool_call_id, result.tool_name, value, result.is_error)


# --- tool results ---------------------------------------------------------------------------------


def result_texts(result: ToolResultPart) -> list[str]:
    """The strings inside a tool result (a JSON result is read leaf by leaf)."""
    out: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, str):
            out.append(value)
        elif isinstance(value, Mapping):
            for item in value.values():
                walk(item)
        elif isinstance(value, (list, tuple)):
            for item in value:
                walk(item)

    walk(result.result)
    return out


def map_result(result: ToolResultPart, transform: Callable[[str], str]) -> ToolResultPart:
    """A copy of the result with `transform` applied to every string in it (the same object if none
    changed)."""

    def walk(value: Any) -> Any:
        if isinstance(value, str):
            return transform(value)
        if isinstance(value, Mapping):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [walk(v) for v in value]
        return value

    new = walk(thaw(result.result))
    if new == thaw(result.result):
        return result
    return ToolResultPart(result.tool_call_id, result.tool_name, new, result.is_error)


def replaced_result(result: ToolResultPart, note: str) -> ToolResultPart:
    return ToolResultPart(result.tool_call_id, result.tool_name, note, result.is_error)


def tool_call_args(ctx: ProcessorContext, call_id: str) -> Mapping[str, Any] | None:
    """The arguments of this turn's tool call `call_id` (the responses so far hold it)."""
    for message in reversed(ctx.messages):
        for call in message.tool_calls:
            if call.tool_call_id == call_id:
                return call.args
    return None


def refuse_working_memory_update(ctx: ProcessorContext, args: Mapping[str, Any] | None) -> bool:
    """Takes the pending working-memory write this call made off the turn's write buffer, so the turn
    saves nothing of it. True when one was found."""
    turn = ctx.turn
    if turn is None or args is None:
        return False
    pending = turn.writes.working_memory
    value = thaw(args.get("memory"))
    for index in range(len(pending) - 1, -1, -1):
        if thaw(pending[index].value) == value:
            del pending[index]
            return True
    return False
