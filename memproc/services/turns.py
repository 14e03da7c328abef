"""Turn orchestration: input processors, the model and tool loop with its step hooks, output
processors, one atomic save.

`Agent.generate` and `Agent.stream` are thin wrappers over `turn_events`, a generator that yields the
stream events of a turn and returns its `GenerateResult`. The turn's messages live in a
`Conversation` (memproc.processors.conversation), which keeps every model request valid.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Generator, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.utils import timezone

from memproc import background
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
from memproc.processors.conversation import Conversation
from memproc.processors.message_history import savable
from memproc.processors.runner import Blocked, ProcessorRunner
from memproc.processors.turn import PendingWorkingMemory, Turn, TurnWrites
from memproc.services.attachments import (
    attachments_commit,
    attachments_discard,
    attachments_link,
    attachments_resolve,
)
from memproc.services.recall import sources_embed, sources_for
from memproc.services.store import DjangoMemoryStore
from memproc.services.threads import messages_insert, thread_ensure
from memproc.services.tripwires import tripwire_log
from memproc.services.working_memory import working_memory_update
from memproc.tools import ToolContext

if TYPE_CHECKING:
    from memproc.agents.agent import Agent

__all__ = [
    "FEEDBACK",
    "PendingWorkingMemory",
    "Turn",
    "TurnWrites",
    "turn_commit",
    "turn_events",
    "turn_start",
]

logger = logging.getLogger(__name__)

FEEDBACK = (
    "[Processor Feedback] Your previous response was not accepted: {reason}. "
    "Please write a new response that addresses this feedback."
)
# Phases whose tripwire log holds the blocked response as well as the input (rule 20).
OUTPUT_PHASES = frozenset({"output_step", "tool_result", "output", "stream"})


def turn_events(
    agent: Agent,
    messages: MessageInput,
    *,
    thread_id: str | None = None,
    resource_id: str | None = None,
    streaming: bool = False,
    memory_options: dict[str, Any] | None = None,
    max_processor_retries: int | None = None,
) -> Generator[StreamEvent, None, GenerateResult]:
    turn = turn_start(
        agent, messages, thread_id=thread_id, resource_id=resource_id, memory_options=memory_options
    )
    retries = agent.max_processor_retries if max_processor_retries is None else max_processor_retries
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise ValidationError("max_processor_retries must be an integer >= 0")
    try:
        return (yield from _TurnExecution(turn, streaming=streaming, max_retries=retries).run())
    finally:
        if turn.attachments:
            attachments_discard(staged=turn.attachments)


def turn_start(
    agent: Agent,
    messages: MessageInput,
    *,
    thread_id: str | None,
    resource_id: str | None,
    memory_options: dict[str, Any] | None = None,
) -> Turn:
    """Normalises input and checks thread ownership (one query when the agent has memory).

    System messages in the input are kept apart: used for this turn after the instructions, never
    saved (rule 18)."""
    now = timezone.now()
    raw = messages if isinstance(messages, list | tuple) else [messages]
    client_ids = {
        str(item.id if isinstance(item, Message) else item["id"])
        for item in raw
        if isinstance(item, Message) or (isinstance(item, dict) and item.get("id"))
    }
    given = [
        m.replace(created_at=m.created_at or now, thread_id=thread_id, resource_id=resource_id)
        for m in to_messages(messages)
    ]
    system_input = [m for m in given if m.role == "system"]
    inputs = [m for m in given if m.role != "system"]
    if not inputs:
        raise ValidationError("messages need at least one message that is not a system message")
    memory = agent.memory_for(memory_options)
    store = None
    exists, title, last_sequence = False, "", None
    if memory is not None:
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
        system_input=system_input,
        thread_exists=exists,
        thread_title=title,
        thread_last_sequence=last_sequence,
        memory_options=dict(memory_options or {}),
    )
    for t in agent.tools:
        turn.add_tool(t)
    return turn


class _TurnExecution:
    def __init__(self, turn: Turn, *, streaming: bool, max_retries: int) -> None:
        self.turn = turn
        self.agent = turn.agent
        self.streaming = streaming
        self.max_retries = max_retries
        self.retries = 0
        self.input_chain, self.output_chain = self.agent.processor_chains(turn.memory_options or None)
        # process_tool_result runs on every processor that has it, input side first, each once.
        self.tool_result_chain = list({id(p): p for p in [*self.input_chain, *self.output_chain]}.values())
        system = [self.agent.instructions_message()] if self.agent.instructions else []
        self.conversation = Conversation(
            system=[*system, *turn.system_input], messages=turn.input_messages, loaded_ids=turn.loaded_ids
        )
        self.runner = ProcessorRunner(turn, self.conversation)
        self.usage: dict[str, Any] = {}
        self.steps = 0
        self.last_prompt: list[Message] = []
        # The response as far as it got, for the tripwire log of an output-side block (rule 20).
        self.draft: list[Message] = []
        self._resolved: dict[int, tuple[Message, Message]] = {}

    def run(self) -> Generator[StreamEvent, None, GenerateResult]:
        turn = self.turn
        try:
            self.runner.run_input(self.input_chain)
        except Blocked as blocked:
            return (yield from self._blocked(blocked.tripwire))
        feedback: list[Message] = []
        while True:
            turn.writes = TurnWrites()
            self.draft = []
            try:
                responses = yield from self._model_loop(feedback)
                responses = self.runner.run_output(self.output_chain, responses)
            except Blocked as blocked:
                tripwire = blocked.tripwire
                if tripwire.retry and tripwire.phase == "output" and self.retries < self.max_retries:
                    self.retries += 1
                    feedback = [_feedback(tripwire)]
                    if self.streaming:
                        yield StreamEvent(type="retry", tripwire=tripwire)
                    continue
                return (yield from self._blocked(tripwire))
            break
        turn_commit(turn)
        saved = turn.writes.messages or savable(
            [*self.conversation.new_input, *responses], internal_tools=turn.internal_tool_names
        )
        result = GenerateResult(
            text=_final_text(responses),
            messages=saved,
            tripwire=None,
            usage=self.usage,
            thread_id=turn.thread_id,
            resource_id=turn.resource_id,
            prompt=self.last_prompt or self.conversation.request_messages(),
            steps=self.steps,
            memory=dict(turn.info),
        )
        if self.streaming:
            yield StreamEvent(type="finish", result=result, usage=self.usage)
        return result

    def _blocked(self, tripwire: Tripwire) -> Generator[StreamEvent, None, GenerateResult]:
        turn = self.turn
        content = list(self.conversation.new_input)
        if tripwire.phase in OUTPUT_PHASES or tripwire.phase == "input_step":
            content += self.draft
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
            prompt=self.last_prompt,
            steps=self.steps,
            memory=dict(turn.info),
        )
        if self.streaming:
            yield StreamEvent(type="tripwire", tripwire=tripwire, result=result)
        return result

    # --- the model and tool loop ---------------------------------------------------------------

    def _model_loop(self, feedback: list[Message]) -> Generator[StreamEvent, None, list[Message]]:
        """Model, then tools, then model again, until an answer without tool calls or the step limit.
        Every call gets the step hooks; a retry of `process_output_step` re-runs that step."""
        responses: list[Message] = []
        step_feedback: list[Message] = []
        step = 0
        while step < self.agent.max_steps:
            view = self.runner.run_input_step(self.input_chain, step=step, responses=responses)
            prompt = self.conversation.request_messages(
                system=[*view.system, *feedback, *step_feedback], messages=view.messages
            )
            self.last_prompt = prompt
            request = ModelRequest(messages=self._resolve(prompt), tools=[t.spec for t in view.tools])
            self.steps += 1
            response = yield from self._model_step(request, responses)
            _add_usage(self.usage, response.usage)
            calls = [c if c.id else ToolCall(new_id(), c.name, c.args) for c in response.tool_calls]
            assistant = _assistant_message(response.text, calls, self.turn)
            drafted = [*responses, assistant] if assistant.parts else list(responses)
            self.draft = drafted
            try:
                drafted = self.runner.run_output_step(
                    self.output_chain, step=step, responses=drafted, tool_calls=calls
                )
            except Blocked as blocked:
                tripwire = blocked.tripwire
                if tripwire.retry and self.retries < self.max_retries:
                    self.retries += 1
                    step_feedback = [_feedback(tripwire)]
                    if self.streaming:
                        yield StreamEvent(type="retry", tripwire=tripwire)
                    continue
                raise
            step_feedback = []
            responses = drafted
            self.draft = responses
            allowed = {c.tool_call_id for m in responses if m.role == "assistant" for c in m.tool_calls}
            to_run = [c for c in calls if c.id in allowed]
            if self.streaming:
                for call in to_run:  # announced once its call survived process_output_step
                    yield StreamEvent(type="tool-call", tool_call=call)
            if not to_run:
                break
            results: list[ToolResultPart] = []
            for call in to_run:
                part = self._run_tool(call)
                self.draft = [*responses, self._tool_message([*results, part])]
                part = self.runner.run_tool_result(
                    self.tool_result_chain, step=step, responses=responses, result=part
                )
                results.append(part)
                if self.streaming:
                    yield StreamEvent(type="tool-result", tool_result=part)
            responses = [*responses, self._tool_message(results)]
            self.draft = responses
            step += 1
        return responses

    def _tool_message(self, results: Sequence[ToolResultPart]) -> Message:
        return Message.create(
            "tool",
            tuple(results),
            thread_id=self.turn.thread_id,
            resource_id=self.turn.resource_id,
            created_at=timezone.now(),
        )

    def _resolve(self, messages: list[Message]) -> list[Message]:
        """Attachment references become URLs or bytes for the request only (what is saved keeps them).
        Resolved once per message object, so later steps cost no query."""
        todo = [m for m in messages if id(m) not in self._resolved]
        if todo:
            resolved = attachments_resolve(
                messages=todo,
                resource_id=self.turn.resource_id,
                model=self.agent.model,
                staged=self.turn.attachments,
            )
            for original, done in zip(todo, resolved, strict=True):
                self._resolved[id(original)] = (original, done)
        return [self._resolved[id(m)][1] for m in messages]

    def _model_step(
        self, request: ModelRequest, responses: list[Message]
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
            # Tool calls are announced after process_output_step, once they are sure to run.
            for part in self.runner.run_stream_part(self.output_chain, event):
                if part.type in ("finish", "tool-call"):
                    continue
                if part.type == "text-delta":
                    text.append(part.text)
                    self.draft = [*responses, _assistant_message("".join(text), [], self.turn)]
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
            _enqueue_embedding(turn)
        if writes.generate_title and writes.messages:
            background.enqueue(
                "memproc.generate_title", kwargs={"thread_id": turn.thread_id, "agent_id": turn.agent.id}
            )
    if writes.messages:
        turn.attachments = []  # committed (or deleted after commit): nothing left to discard


def _enqueue_embedding(turn: Turn) -> None:
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


def _feedback(tripwire: Tripwire) -> Message:
    return Message.create("system", FEEDBACK.format(reason=tripwire.reason.rstrip(".")))


def _assistant_message(text: str, calls: Sequence[ToolCall], turn: Turn) -> Message:
    parts: list[Any] = [TextPart(text)] if text else []
    parts += [ToolCallPart(c.id or new_id(), c.name, c.args) for c in calls]
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
