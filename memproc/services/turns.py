"""Turn orchestration: input processors, the model and tool loop, output processors, one atomic save.

`Agent.generate` and `Agent.stream` are thin wrappers over `turn_events`, a generator that yields the
stream events of a turn and returns its `GenerateResult`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.utils import timezone

from memproc.events import GenerateResult, StreamEvent, Tripwire
from memproc.exceptions import ThreadOwnershipError, ToolError, ValidationError
from memproc.llm.types import ModelRequest, ModelResponse, ToolCall
from memproc.messages import (
    Message,
    MessageInput,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    new_id,
    thaw,
    to_messages,
)
from memproc.processors.runner import Blocked, ProcessorRunner
from memproc.tools import Tool, ToolContext

if TYPE_CHECKING:
    from memproc.agents.agent import Agent
    from memproc.processors.attachments import StagedAttachment
    from memproc.processors.store import MemoryStore

logger = logging.getLogger(__name__)

FEEDBACK = (
    "[Processor Feedback] Your previous response was not accepted: {reason}. "
    "Please write a new response that addresses this feedback."
)


@dataclass
class PendingWorkingMemory:
    scope: str
    key: str
    value: Any
    mode: str
    template: str
    schema: dict[str, Any] | None


@dataclass
class TurnWrites:
    """What memory processors asked to store; applied together at commit, dropped on abort."""

    messages: list[Message] = field(default_factory=list)
    embed: list[Message] = field(default_factory=list)
    embedder: Any = None
    working_memory: list[PendingWorkingMemory] = field(default_factory=list)
    generate_title: bool = False


@dataclass
class Turn:
    agent: Agent
    thread_id: str | None
    resource_id: str | None
    store: MemoryStore | None
    input_messages: list[Message]
    # Ids the caller chose (not generated here): only these can clash with stored messages.
    client_ids: set[str] = field(default_factory=set)
    thread_exists: bool = False
    thread_title: str = ""
    thread_last_sequence: int | None = None  # as read at the start of the turn
    loaded_ids: set[str] = field(default_factory=set)
    tools: dict[str, Tool] = field(default_factory=dict)
    writes: TurnWrites = field(default_factory=TurnWrites)
    # Files AttachmentUploader stored for this turn: their rows are written at commit; the files the
    # turn wrote are deleted if it ends without committing (blocked, failed or abandoned).
    attachments: list[StagedAttachment] = field(default_factory=list)
    # What memory did this turn, for inspection (the demo's memory panel, the API's `memory` field).
    info: dict[str, Any] = field(default_factory=dict)

    def add_tool(self, tool: Tool) -> None:
        self.tools[tool.name] = tool

    def mark_loaded(self, messages: list[Message]) -> None:
        self.loaded_ids.update(m.id for m in messages)

    @property
    def internal_tool_names(self) -> set[str]:
        return {name for name, t in self.tools.items() if t.internal}


def turn_events(
    agent: Agent,
    messages: MessageInput,
    *,
    thread_id: str | None = None,
    resource_id: str | None = None,
    streaming: bool = False,
) -> Generator[StreamEvent, None, GenerateResult]:
    turn = turn_start(agent, messages, thread_id=thread_id, resource_id=resource_id)
    try:
        return (yield from _TurnExecution(turn, streaming=streaming).run())
    finally:
        if turn.attachments:
            from memproc.services.attachments import attachments_discard

            attachments_discard(staged=turn.attachments)


def turn_start(
    agent: Agent, messages: MessageInput, *, thread_id: str | None, resource_id: str | None
) -> Turn:
    """Normalises input and checks thread ownership (one query when the agent has memory)."""
    now = timezone.now()
    raw = messages if isinstance(messages, list | tuple) else [messages]
    client_ids = {
        str(item.id if isinstance(item, Message) else item["id"])
        for item in raw
        if isinstance(item, Message) or (isinstance(item, dict) and item.get("id"))
    }
    inputs = [
        m.replace(created_at=m.created_at or now, thread_id=thread_id, resource_id=resource_id)
        for m in to_messages(messages)
    ]
    if any(m.role == "system" for m in inputs):
        raise ValidationError("System messages cannot be sent as input; use the agent's instructions")
    store = None
    exists, title, last_sequence = False, "", None
    if agent.memory is not None:
        from memproc.services.store import DjangoMemoryStore

        store = DjangoMemoryStore()
        thread_id = thread_id or new_id()
        row = store.thread_owner(thread_id=thread_id)
        if row is not None:
            owner, title, last_sequence = row
            if resource_id and owner != resource_id:
                raise ThreadOwnershipError(f"Thread {thread_id!r} belongs to another resource")
            resource_id, exists = owner, True
        elif not resource_id:
            raise ValidationError("resource_id is required to start a thread")
        inputs = [m.replace(thread_id=thread_id, resource_id=resource_id) for m in inputs]
    turn = Turn(
        agent=agent,
        thread_id=thread_id,
        resource_id=resource_id,
        store=store,
        input_messages=inputs,
        client_ids=client_ids,
        thread_exists=exists,
        thread_title=title,
        thread_last_sequence=last_sequence,
    )
    for t in agent.tools:
        turn.add_tool(t)
    return turn


class _TurnExecution:
    def __init__(self, turn: Turn, *, streaming: bool) -> None:
        self.turn = turn
        self.agent = turn.agent
        self.streaming = streaming
        self.runner = ProcessorRunner(turn)
        self.input_chain, self.output_chain = self.agent.processor_chains()
        self.usage: dict[str, Any] = {}
        self.steps = 0

    def run(self) -> Generator[StreamEvent, None, GenerateResult]:
        turn = self.turn
        system = [self.agent.instructions_message()] if self.agent.instructions else []
        try:
            prompt, system = self.runner.run_messages(
                self.input_chain,
                hook_name="process_input",
                phase="input",
                messages=list(turn.input_messages),
                system_messages=system,
            )
        except Blocked as blocked:
            return (yield from self._blocked(blocked.tripwire, turn.input_messages, prompt=[]))
        new_input = [m for m in prompt if m.id not in turn.loaded_ids]
        feedback: list[Message] = []
        attempts = 0
        while True:
            turn.writes = TurnWrites()
            try:
                responses = yield from self._model_loop(system + feedback, prompt)
                final, _ = self.runner.run_messages(
                    self.output_chain,
                    hook_name="process_output_result",
                    phase="output",
                    messages=new_input + responses,
                    system_messages=system,
                )
            except Blocked as blocked:
                tripwire = blocked.tripwire
                if (
                    tripwire.retry
                    and tripwire.phase == "output"
                    and attempts < self.agent.max_processor_retries
                ):
                    attempts += 1
                    feedback = [Message.create("system", FEEDBACK.format(reason=tripwire.reason.rstrip(".")))]
                    continue
                return (yield from self._blocked(tripwire, new_input, prompt=system + prompt))
            break
        turn_commit(turn)
        result = GenerateResult(
            text=_final_text(final),
            messages=final,
            tripwire=None,
            usage=self.usage,
            thread_id=turn.thread_id,
            resource_id=turn.resource_id,
            prompt=system + prompt,
            steps=self.steps,
            memory=dict(turn.info),
        )
        if self.streaming:
            yield StreamEvent(type="finish", result=result, usage=self.usage)
        return result

    def _blocked(
        self, tripwire: Tripwire, content: list[Message], prompt: list[Message]
    ) -> Generator[StreamEvent, None, GenerateResult]:
        from memproc.services.tripwires import tripwire_log

        turn = self.turn
        tripwire_log(
            tripwire=tripwire,
            agent_id=self.agent.id,
            thread_id=turn.thread_id,
            resource_id=turn.resource_id,
            messages=content,
        )
        result = GenerateResult(
            text="",
            messages=[],
            tripwire=tripwire,
            usage=self.usage,
            thread_id=turn.thread_id,
            resource_id=turn.resource_id,
            prompt=prompt,
            steps=self.steps,
            memory=dict(turn.info),
        )
        if self.streaming:
            yield StreamEvent(type="tripwire", tripwire=tripwire, result=result)
        return result

    def _model_loop(
        self, system: list[Message], prompt: list[Message]
    ) -> Generator[StreamEvent, None, list[Message]]:
        """Model, then tools, then model again, until an answer without tool calls or the step limit."""
        from memproc.services.attachments import attachments_resolve

        responses: list[Message] = []
        tools = [t.spec for t in self.turn.tools.values()]
        # References become URLs or bytes for the request only; `prompt` (and what is saved) keeps them.
        context = attachments_resolve(
            messages=system + prompt,
            resource_id=self.turn.resource_id,
            model=self.agent.model,
            staged=self.turn.attachments,
        )
        for _ in range(self.agent.max_steps):
            self.steps += 1
            request = ModelRequest(messages=context + responses, tools=tools)
            response = yield from self._model_step(request, system)
            _add_usage(self.usage, response.usage)
            assistant = _assistant_message(response, self.turn)
            if assistant.parts:
                responses.append(assistant)
            if not response.tool_calls:
                break
            results = []
            for call in response.tool_calls:
                part = self._run_tool(call)
                results.append(part)
                if self.streaming:
                    yield StreamEvent(type="tool-result", tool_result=part)
            responses.append(
                Message.create(
                    "tool",
                    tuple(results),
                    thread_id=self.turn.thread_id,
                    resource_id=self.turn.resource_id,
                    created_at=timezone.now(),
                )
            )
        return responses

    def _model_step(
        self, request: ModelRequest, system: list[Message]
    ) -> Generator[StreamEvent, None, ModelResponse]:
        model = self.agent.model
        if not self.streaming:
            return model.generate(request)
        if not hasattr(model, "stream"):
            response = model.generate(request)
            events: Iterator[StreamEvent] = iter(
                [StreamEvent(type="text-delta", text=response.text)] if response.text else []
            )
            events = _chain(
                events,
                [StreamEvent(type="tool-call", tool_call=c) for c in response.tool_calls],
                StreamEvent(type="finish", usage=response.usage, finish_reason=response.finish_reason),
            )
        else:
            events = iter(model.stream(request))
        text: list[str] = []
        calls: list[ToolCall] = []
        usage: dict[str, Any] = {}
        finish = "stop"
        for event in events:
            if event.type == "finish":
                usage, finish = dict(event.usage or {}), event.finish_reason or finish
            elif event.type == "tool-call" and event.tool_call is not None:
                calls.append(event.tool_call)  # calls run whatever stream processors make of the event
            # The model's finish goes through the processors too, so buffering ones can flush what
            # they hold; the turn itself emits the one finish event the client sees, with the result.
            for part in self.runner.run_stream_part(self.output_chain, event, system):
                if part.type == "finish":
                    continue
                if part.type == "text-delta":
                    text.append(part.text)
                yield part
        return ModelResponse(text="".join(text), tool_calls=calls, usage=usage, finish_reason=finish)

    def _run_tool(self, call: ToolCall) -> ToolResultPart:
        turn = self.turn
        tool = turn.tools.get(call.name)
        if tool is None:
            return ToolResultPart(call.id, call.name, f"Unknown tool {call.name!r}", is_error=True)
        context = ToolContext(
            thread_id=turn.thread_id, resource_id=turn.resource_id, agent=self.agent, turn=turn
        )
        try:
            result = tool.run(call.args, context)
        except (ToolError, ValidationError) as exc:
            return ToolResultPart(call.id, call.name, str(exc), is_error=True)
        except Exception as exc:
            logger.exception("memproc: tool %s failed", call.name)
            return ToolResultPart(call.id, call.name, f"{type(exc).__name__}: {exc}", is_error=True)
        return ToolResultPart(call.id, call.name, _jsonable(result))


def turn_commit(turn: Turn) -> None:
    """Rule 9: the turn's messages and working-memory changes are saved together or not at all;
    embeddings and titles run after commit."""
    from memproc import background
    from memproc.services.attachments import attachments_commit, attachments_link
    from memproc.services.threads import messages_insert, thread_ensure
    from memproc.services.working_memory import working_memory_update

    writes = turn.writes
    if not (writes.messages or writes.working_memory):
        return
    assert turn.thread_id and turn.resource_id
    with transaction.atomic():
        if not turn.thread_exists:
            thread_ensure(thread_id=turn.thread_id, resource_id=turn.resource_id, agent_id=turn.agent.id)
            turn.thread_exists = True
            memory = turn.agent.memory
            writes.generate_title = bool(memory and memory.generate_title and not turn.thread_title)
        if writes.messages:
            writes.messages = attachments_commit(staged=turn.attachments, messages=writes.messages)
            messages_insert(thread_id=turn.thread_id, resource_id=turn.resource_id, messages=writes.messages)
            attachments_link(resource_id=turn.resource_id, messages=writes.messages)
        for wm in writes.working_memory:
            working_memory_update(
                scope=wm.scope,
                key=wm.key,
                value=wm.value,
                source="model",
                mode=wm.mode,
                template=wm.template,
                schema=wm.schema,
                thread_id=turn.thread_id,
            )
        if writes.embed:
            _enqueue_embedding(turn, background)
        if writes.generate_title and writes.messages:
            background.enqueue(
                "memproc.generate_title", kwargs={"thread_id": turn.thread_id, "agent_id": turn.agent.id}
            )
    if writes.messages:
        turn.attachments = []  # committed (or deleted after commit): nothing left to discard


def _enqueue_embedding(turn: Turn, background: Any) -> None:
    from memproc.services.recall import sources_embed, sources_for

    writes = turn.writes
    sources = sources_for(writes.embed, thread_id=turn.thread_id or "", resource_id=turn.resource_id or "")
    if not sources:
        return

    def embed_now() -> None:
        sources_embed(sources=sources, embedder=writes.embedder)

    background.enqueue(
        "memproc.embed_messages",
        kwargs={"message_ids": [s.message_id for s in sources], "agent_id": turn.agent.id},
        inline=embed_now,
    )


def _assistant_message(response: ModelResponse, turn: Turn) -> Message:
    parts: list[Any] = [TextPart(response.text)] if response.text else []
    parts += [ToolCallPart(c.id or new_id(), c.name, c.args) for c in response.tool_calls]
    return Message.create(
        "assistant",
        tuple(parts),
        thread_id=turn.thread_id,
        resource_id=turn.resource_id,
        created_at=timezone.now(),
    )


def _final_text(messages: list[Message]) -> str:
    for message in reversed(messages):
        if message.role == "assistant" and message.text:
            return message.text
    return ""


def _add_usage(total: dict[str, Any], usage: dict[str, Any]) -> None:
    for key, value in (usage or {}).items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            total[key] = total.get(key, 0) + value


def _jsonable(value: Any) -> Any:
    value = thaw(value)
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return str(value)


def _chain(first: Iterator[StreamEvent], rest: list[StreamEvent], last: StreamEvent) -> Iterator[StreamEvent]:
    yield from first
    yield from rest
    yield last
