"""WorkingMemory: injects the working memory as one system message and offers the update tool."""

from __future__ import annotations

import json
from typing import Any

from memproc.conf import settings
from memproc.exceptions import ConfigurationError, ToolError, ValidationError
from memproc.messages import Message
from memproc.messages.prompt_tags import neutralise
from memproc.processors.base import ProcessorContext
from memproc.processors.tokens import get_token_counter
from memproc.processors.turn import PendingWorkingMemory
from memproc.processors.turn_info import WorkingMemoryRead
from memproc.processors.working_memory_fields import keep_pinned
from memproc.processors.working_memory_values import compute_next
from memproc.tools import DEFAULT_WORKING_MEMORY_TEMPLATE, WORKING_MEMORY_TOOL, Tool, ToolContext

TOOL_NAME = WORKING_MEMORY_TOOL
DEFAULT_TEMPLATE = DEFAULT_WORKING_MEMORY_TEMPLATE
# The update tool's arguments, by mode: an object of changed fields, or the whole Markdown document.
UPDATE_TOOL_PARAMETERS: dict[str, dict[str, Any]] = {
    mode: {"type": "object", "properties": {"memory": {"type": kind}}, "required": ["memory"]}
    for mode, kind in (("schema", "object"), ("markdown", "string"))
}
SIZE_LIMIT_MESSAGE = "working memory is limited to {limit} tokens; rewrite it shorter"
PINNED_NOTE = "\nThe user set these fields themselves; keep them as they are: {names}."
PINNED_RESULT = "The user pinned these fields; their values were kept as the user set them: {names}."

MARKDOWN_INSTRUCTIONS = """WORKING MEMORY
You have a working memory: information about the user and the conversation that persists across \
messages{scope_note}. Keep it current: when you learn something worth remembering, call the \
`{tool}` tool with the COMPLETE updated Markdown (it replaces the whole memory). Follow the template. \
Never erase existing information unless the user asks you to. Do not mention the working memory to \
the user.{limit_note}{read_only_note}"""

SCHEMA_INSTRUCTIONS = """WORKING MEMORY
You have a working memory stored as JSON that persists across messages{scope_note}. When you learn \
something worth remembering, call `{tool}` with only the fields that changed: objects are merged, \
`null` deletes a field, arrays replace the old array. The JSON schema it must match:
<working_memory_schema>
{schema}
</working_memory_schema>{limit_note}{read_only_note}"""


class WorkingMemory:
    """Input: reads the working memory of the thread or the resource and adds one system message with
    the instructions, the template (or schema) and the current data; offers the model the
    `updateWorkingMemory` tool (not when read-only). The tool validates at once (the model sees a
    refusal as a tool error) and records the change on the turn; the change is written with the turn's
    save, with compare-and-swap, and a revision row. The tool's calls are never saved to history.

    With `max_tokens`, an update whose result is longer (counted with the TOKENIZER setting) is
    refused: the model gets the tool error "working memory is limited to N tokens; rewrite it
    shorter" and nothing is stored. The instructions state the limit.

    Fields the user pinned in the memory view (resource scope; the store reads them with the value)
    are named in the instructions, and an update keeps their values: the tool result says which
    fields it kept, and the save keeps them again under compare-and-swap.
    """

    id = "working-memory"

    def __init__(
        self,
        *,
        scope: str = "resource",
        template: str | None = None,
        schema: dict[str, Any] | None = None,
        max_tokens: int | None = None,
        read_only: bool = False,
    ) -> None:
        if scope not in ("resource", "thread"):
            raise ConfigurationError("WorkingMemory(scope=...) must be 'resource' or 'thread'")
        if schema is not None and (not isinstance(schema, dict) or schema.get("type", "object") != "object"):
            raise ConfigurationError("WorkingMemory(schema=...) must be a JSON schema of type object")
        if max_tokens is not None and (
            isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens <= 0
        ):
            raise ConfigurationError("WorkingMemory(max_tokens=...) must be a positive integer or None")
        self.max_tokens = max_tokens
        self.scope = scope
        self.schema = schema
        self.template = template if template is not None else ("" if schema else DEFAULT_TEMPLATE)
        self.read_only = read_only

    @property
    def mode(self) -> str:
        return "schema" if self.schema else "markdown"

    def key_for(self, thread_id: str | None, resource_id: str | None) -> str | None:
        return thread_id if self.scope == "thread" else resource_id

    def process_input(self, ctx: ProcessorContext) -> list[Message] | None:
        turn, store = ctx.turn, ctx.store
        key = self.key_for(ctx.thread_id, ctx.resource_id)
        if turn is None or store is None or not key:
            return None
        current, version, pinned = "", 0, ()
        if self.scope == "resource" or turn.thread_exists:
            value = store.working_memory_get(scope=self.scope, key=key, resource_id=ctx.resource_id)
            current, version = value.text, value.version
            pinned = tuple(getattr(value, "pinned", ()))  # a store from before pins has none
        ctx.state["current"] = current
        ctx.state["read"] = (current, version)
        ctx.state["pinned"] = pinned
        turn.info.working_memory = current
        turn.info.working_memory_version = WorkingMemoryRead(self.scope, key, version)
        if not self.read_only:
            turn.add_tool(self.update_tool(ctx.state, key))
        return [*ctx.messages, self.system_message(current, pinned=pinned)]

    def system_message(self, current: str, *, pinned: tuple[str, ...] = ()) -> Message:
        scope_note = (
            " with this user, in every conversation" if self.scope == "resource" else " in this conversation"
        )
        read_only_note = "\nThe working memory is read-only in this conversation." if self.read_only else ""
        limit_note = f" Keep it under {self.max_tokens} tokens." if self.max_tokens else ""
        if pinned:
            limit_note += PINNED_NOTE.format(names=", ".join(neutralise(n) for n in pinned))
        if self.mode == "schema":
            head = SCHEMA_INSTRUCTIONS.format(
                scope_note=scope_note,
                tool=TOOL_NAME,
                read_only_note=read_only_note,
                limit_note=limit_note,
                schema=json.dumps(self.schema, indent=2),
            )
        else:
            head = MARKDOWN_INSTRUCTIONS.format(
                scope_note=scope_note, tool=TOOL_NAME, read_only_note=read_only_note, limit_note=limit_note
            )
            head += f"\n<working_memory_template>\n{self.template}\n</working_memory_template>"
        # Stored memory may name the block's tags but never close it (memproc.messages.prompt_tags).
        data = neutralise(current) if current else ("{}" if self.mode == "schema" else self.template)
        return Message.create(
            "system", f"{head}\n<working_memory>\n{data}\n</working_memory>", id="working-memory"
        )

    def update_tool(self, state: dict[str, Any], key: str) -> Tool:
        params = UPDATE_TOOL_PARAMETERS[self.mode]
        if self.mode == "schema":
            description = "Update the working memory: send only changed fields (objects merge, null deletes)."
        else:
            description = "Replace the working memory with the complete updated Markdown."

        def execute(memory: Any, context: ToolContext) -> dict[str, Any]:
            return self.apply_update(state, key, memory, context)

        return Tool(
            name=TOOL_NAME,
            description=description,
            parameters=params,
            execute=execute,
            wants_context=True,
            internal=True,
            schema_checked=True,  # constants, checked by tests/pipeline/test_tool_validation.py
        )

    def apply_update(
        self, state: dict[str, Any], key: str, memory: Any, context: ToolContext
    ) -> dict[str, Any]:
        try:
            new = compute_next(
                current=state.get("current", ""),
                value=memory,
                template=self.template,
                schema=self.schema,
                mode=self.mode,
            )
            pinned = state.get("pinned", ())
            new, kept = keep_pinned(
                current=state.get("current", ""),
                new=new,
                pinned=pinned,
                mode=self.mode,
                template=self.template,
            )
            check_size(new, max_tokens=self.max_tokens)
        except ValidationError as exc:
            raise ToolError(str(exc)) from exc
        state["current"] = new
        turn = context.turn
        if turn is not None:
            turn.info.working_memory = new
            turn.writes.working_memory.append(
                PendingWorkingMemory(
                    scope=self.scope,
                    key=key,
                    value=memory,
                    mode=self.mode,
                    template=self.template,
                    schema=self.schema,
                    expected=state.pop("read", None),
                    pinned=pinned,
                )
            )
        if kept:
            return {"success": True, "pinned": kept, "note": PINNED_RESULT.format(names=", ".join(kept))}
        return {"success": True}


def check_size(text: str, *, max_tokens: int | None) -> None:
    """Refuses (ValidationError) a working memory longer than `max_tokens` (TOKENIZER's count), and,
    whatever the configuration, one longer than MAX_WORKING_MEMORY_CHARS: it is sent with every turn,
    and an unbounded one would make every later turn fail its token budget."""
    cap = int(settings.MAX_WORKING_MEMORY_CHARS)
    if len(text) > cap:
        raise ValidationError(
            f"working memory is limited to {cap} characters; rewrite it shorter (this one has {len(text)})"
        )
    if max_tokens is None:
        return
    tokens = get_token_counter().count_text(text)
    if tokens > max_tokens:
        raise ValidationError(f"{SIZE_LIMIT_MESSAGE.format(limit=max_tokens)} (this one has {tokens})")
