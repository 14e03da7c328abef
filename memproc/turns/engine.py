"""Turn orchestration: input processors, the model and tool loop with its step hooks, output
processors, one atomic save.

The turn itself is `TurnEngine.run()`, a generator that does no I/O of its own: it yields the
turn's stream events and, for every step that may block (the database, files, tools, user hooks) or
wait (the model), an *effect* (memproc.turns.effects), and receives the effect's result
back. Two drivers perform the effects: `memproc.turns.sync.turn_events` calls them
directly, for `Agent.generate`/`stream`; `memproc.turns.aio.turn_events_async` awaits the
model natively and runs blocking steps in worker threads that hold a database connection only for
the step, so concurrent `agenerate`/`astream` turns overlap (DESIGN §8). The turn's messages live in
a `Conversation` (memproc.processors.conversation), which keeps every model request valid; its
writes are saved by memproc.turns.commit.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from django.utils import timezone

from memproc import logs, telemetry
from memproc.conf import settings
from memproc.events import GenerateResult, StreamEvent, Tripwire
from memproc.exceptions import ThreadNotFoundError, ToolError, ValidationError
from memproc.llm.types import ModelRequest, ModelResponse, ToolCall
from memproc.messages import (
    AttachmentRef,
    Message,
    MessageInput,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    new_id,
    thaw,
    to_messages,
)
from memproc.models import split_thread_key, thread_key
from memproc.processors.conversation import Conversation, unanswered_calls
from memproc.processors.message_history import savable
from memproc.processors.runner import Blocked, ProcessorRunner, StepView
from memproc.processors.turn import Turn, TurnWrites
from memproc.selectors import message_ids_from, thread_key_for
from memproc.services.attachments import (
    attachments_discard,
    attachments_resolve,
)
from memproc.services.store import DjangoMemoryStore
from memproc.signals import send_after_commit, turn_completed
from memproc.tools import ToolContext
from memproc.turns.commit import blocked_save, turn_commit, turn_manifest
from memproc.turns.effects import (
    Blocking,
    EngineStep,
    ModelGenerate,
    ModelStreamClose,
    ModelStreamNext,
    ModelStreamOpen,
)
from memproc.turns.records import turn_record_alone

if TYPE_CHECKING:
    from memproc.agents.agent import Agent

__all__ = ["FEEDBACK", "TurnEngine", "turn_start"]

logger = logging.getLogger(__name__)

FEEDBACK = (
    "[Processor Feedback] Your previous response was not accepted: {reason}. "
    "Please write a new response that addresses this feedback."
)
# Phases whose tripwire log holds the blocked response as well as the input (rule 20).
OUTPUT_PHASES = frozenset({"output_step", "tool_result", "output", "stream"})


def turn_start(
    agent: Agent,
    messages: MessageInput,
    *,
    thread_id: str | None,
    resource_id: str | None,
    memory_options: dict[str, Any] | None = None,
    summaries: bool = True,
    replace_from: str | None = None,
) -> Turn:
    """Normalises input and checks thread ownership (one query when the agent has memory, and one
    more for the thread's compaction summary with `summaries`).

    System messages in the input are kept apart: used for this turn after the instructions, never
    saved (rule 18).

    With `replace_from` (a stored message of the thread) the turn replaces that message and every
    later one: it reads the thread as it was before them, and its save deletes them in the same
    transaction; a turn that fails, is blocked or saves nothing leaves them as they were."""
    now = timezone.now()
    raw = messages if isinstance(messages, list | tuple) else [messages]
    client_ids = {
        str(item.id if isinstance(item, Message) else item["id"])
        for item in raw
        if isinstance(item, Message) or (isinstance(item, dict) and item.get("id"))
    }
    given = to_messages(messages)
    system_input = [
        m.replace(created_at=m.created_at or now, thread_id=thread_id, resource_id=resource_id)
        for m in given
        if m.role == "system"
    ]
    inputs = [m for m in given if m.role != "system"]
    if not inputs:
        raise ValidationError("messages need at least one message that is not a system message")
    ids = [m.id for m in inputs]
    if len(set(ids)) != len(ids):
        twice = next(i for i in ids if ids.count(i) > 1)
        raise ValidationError(f"message id {twice!r} is used twice in this turn's input; ids must be unique")
    unanswered = unanswered_calls(inputs)
    if unanswered:
        index, calls = next(iter(unanswered.items()))
        raise ValidationError(
            f"tool call {calls[0]!r} of input message {index} has no result: the tool messages right after "
            "it must answer each of its calls (a provider refuses an unanswered call)"
        )
    memory = agent.memory_for(memory_options)
    store = None
    replaces: list[str] = []
    exists, title, last_sequence = False, "", None
    if memory is not None:
        store = DjangoMemoryStore(summaries=summaries)
        if not resource_id:
            resource_id = _resource_of(thread_id)
        thread_id = thread_id or new_id()
        row = store.thread_owner(thread_id=thread_id, resource_id=resource_id)
        if row is not None:
            _, title, last_sequence = row
            exists = True
        if exists and replace_from:
            cut, replaces = message_ids_from(
                thread_key=thread_key(resource_id, thread_id), message_id=replace_from
            )
            if cut is not None:
                store = DjangoMemoryStore(summaries=summaries, before=cut, hidden=replaces)
                store.thread_owner(thread_id=thread_id, resource_id=resource_id)
    inputs = [
        m.replace(created_at=m.created_at or now, thread_id=thread_id, resource_id=resource_id)
        for m in inputs
    ]
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
        replaces=replaces,
    )
    for t in agent.tools:
        turn.add_tool(t)
    return turn


def _resource_of(thread_id: str | None) -> str:
    """The resource of the one thread called `thread_id`, for a caller who named no resource (Python;
    the HTTP API always settles it). A thread id names a thread within its resource, so an id that
    several resources use needs the caller to say which."""
    if not thread_id:
        raise ValidationError("resource_id is required to start a thread")
    try:
        return split_thread_key(thread_key_for(thread_id=thread_id))[0]
    except ThreadNotFoundError:
        raise ValidationError("resource_id is required to start a thread") from None


class TurnEngine:
    """One turn, as a generator of stream events and effects (see the module docstring).

    Code between effects is plain computation (message lists, the conversation object, stream hooks),
    so it may run on an event loop; everything that can block is a `Blocking` effect. Hook chains
    with no processor for a hook cost no effect.
    """

    def __init__(
        self,
        agent: Agent,
        messages: MessageInput,
        *,
        thread_id: str | None = None,
        resource_id: str | None = None,
        streaming: bool = False,
        memory_options: dict[str, Any] | None = None,
        max_processor_retries: int | None = None,
        replace_from: str | None = None,
    ) -> None:
        retries = agent.max_processor_retries if max_processor_retries is None else max_processor_retries
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ValidationError("max_processor_retries must be an integer >= 0")
        self.agent = agent
        self.streaming = streaming
        self.max_retries = retries
        self.retries = 0
        self._start_args = (messages, thread_id, resource_id, memory_options)
        self.replace_from = replace_from
        self.turn: Turn | None = None
        self.usage: dict[str, Any] = {}
        self.steps = 0
        self.last_prompt: list[Message] = []
        # The response as far as it got, for the tripwire log of an output-side block (rule 20).
        self.draft: list[Message] = []
        # Set once the turn's save (or a blocked turn's log) committed: a driver cancelled after that
        # still has the turn's result, and must not report that nothing was saved.
        self.saved = False
        self.result: GenerateResult | None = None
        self._resolved: dict[int, tuple[Message, Message]] = {}
        # The span current where the turn was created (a request's) is its trace parent.
        self._trace_parent = telemetry.current_span()
        self.span: Any = telemetry.NO_SPAN
        self._log_binding: Any = None
        self.record_id = uuid.uuid4()
        self.started_at = timezone.now()
        self._clock = time.perf_counter()

    def cleanup(self) -> None:
        """Deletes the files a turn that did not commit stored (blocking: drivers run it as such)."""
        if self.turn is not None and self.turn.attachments:
            attachments_discard(staged=self.turn.attachments)
            self.turn.attachments = []

    def _start(self) -> Turn:
        messages, thread_id, resource_id, memory_options = self._start_args
        self.input_chain, self.output_chain = self.agent.processor_chains(memory_options or None)
        return turn_start(
            self.agent,
            messages,
            thread_id=thread_id,
            resource_id=resource_id,
            memory_options=memory_options,
            summaries=any(getattr(p, "compaction", None) is not None for p in self.input_chain),
            replace_from=self.replace_from,
        )

    def _setup(self, turn: Turn) -> None:
        self.turn = turn
        turn.trace = self.span
        logs.rebind(thread_id=turn.thread_id, resource_id=turn.resource_id)
        self.span.set_attributes(
            {"gen_ai.conversation.id": turn.thread_id, "memproc.resource.id": turn.resource_id}
        )
        # process_tool_result runs on every processor that has it, input side first, each once.
        self.tool_result_chain = list({id(p): p for p in [*self.input_chain, *self.output_chain]}.values())
        self.has_step_hooks = any(
            getattr(p, "process_input_step", None) is not None for p in self.input_chain
        )
        system = [self.agent.instructions_message()] if self.agent.instructions else []
        self.conversation = Conversation(
            system=[*system, *turn.system_input], messages=turn.input_messages, loaded_ids=turn.loaded_ids
        )
        self.runner = ProcessorRunner(turn, self.conversation)

    def run(self) -> EngineStep:
        """The turn, traced as `invoke_agent <agent id>`; a turn that fails leaves a failed record."""
        self.span = telemetry.start_span(
            f"invoke_agent {self.agent.id}",
            parent=self._trace_parent,
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.id": self.agent.id,
                "gen_ai.agent.name": self.agent.name,
            },
        )
        try:
            result = yield from self._run()
            self.span.set_attribute("memproc.turn.status", "blocked" if result.tripwire else "completed")
        except GeneratorExit:
            self.span.set_attribute("memproc.turn.status", "cancelled")
            raise
        except BaseException as exc:
            telemetry.fail(self.span, exc)
            self.span.set_attribute("memproc.turn.status", "failed")
            if isinstance(exc, Exception) and self.turn is not None and settings.RECORD_TURNS:
                record = self._record("failed", error=type(exc).__qualname__)
                yield Blocking(partial(turn_record_alone, **record))
            raise
        finally:
            self.span.end()
            if self._log_binding is not None:
                logs.unbind(self._log_binding)
                self._log_binding = None
        return result

    def _record(self, status: str, *, message_ids: Sequence[str] = (), **extra: Any) -> dict[str, Any]:
        """The fields of this turn's TurnRecord (written by the caller)."""
        turn = self.turn
        assert turn is not None
        return {
            "record_id": self.record_id,
            "agent_id": self.agent.id,
            "thread_id": turn.thread_id,
            "resource_id": turn.resource_id,
            "status": status,
            "model": self.agent.model_id,
            "steps": self.steps,
            "usage": dict(self.usage),
            "manifest": turn_manifest(turn),
            "message_ids": list(message_ids),
            "started_at": self.started_at,
            "duration_ms": (time.perf_counter() - self._clock) * 1000,
            **extra,
        }

    def _begin(self) -> None:
        """The turn's reads and its input processors: one blocking step (one worker-thread hop for
        the async driver). A Blocked from an input processor leaves `self.turn` set."""
        self._setup(self._start())
        self.runner.run_input(self.input_chain)

    def _run(self) -> EngineStep:
        # Bound here, in the driver's context, which the worker threads' contexts copy; completed by
        # `_setup` once the thread is known.
        _, thread_id, resource_id, _ = self._start_args
        self._log_binding = logs.bind(
            agent_id=self.agent.id, thread_id=thread_id, resource_id=resource_id, turn_id=self.record_id
        )
        try:
            yield Blocking(self._begin)
        except Blocked as blocked:
            return (yield from self._blocked(blocked.tripwire))
        turn = self.turn
        assert turn is not None
        feedback: list[Message] = []
        while True:
            turn.writes = TurnWrites()
            self.draft = []
            try:
                responses = yield from self._model_loop(feedback)
                record = yield Blocking(self._finish, (responses,))
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
        result = self.result
        assert result is not None
        if turn_completed.receivers:
            yield Blocking(
                partial(_send_turn_completed, result=result, agent_id=self.agent.id, record=record)
            )
        if self.streaming:
            yield StreamEvent(type="finish", result=result, usage=self.usage)
        return result

    def _finish(self, responses: list[Message]) -> dict[str, Any] | None:
        """The output processors, then the atomic save: one blocking step. A Blocked from an output
        processor comes before anything is saved (the caller may retry the turn's model loop).
        Sets `result` once saved; returns the turn record's fields (None without RECORD_TURNS)."""
        turn = self.turn
        assert turn is not None
        responses = self.runner.run_output(self.output_chain, responses=responses)
        # The manifest is built only when it is kept (RECORD_TURNS): no work on the turn otherwise.
        record = (
            self._record("completed", message_ids=[m.id for m in turn.writes.messages])
            if settings.RECORD_TURNS
            else None
        )
        with telemetry.span("memproc.save", parent=self.span) as save_span:
            save_span.set_attribute("memproc.save.messages", len(turn.writes.messages))
            turn_commit(turn, record=record)
        saved = turn.writes.messages or savable(
            [*self.conversation.new_input, *responses], internal_tools=turn.internal_tool_names
        )
        self.result = GenerateResult(
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
        self.saved = True
        return record

    def _hooks(
        self, hook: str, method: Callable[..., Any], chain: Sequence[Any], unchanged: Any, **kwargs: Any
    ) -> EngineStep:
        """Runs a hook chain as one blocking step; when no processor has the hook, no step at all."""
        if not any(getattr(p, hook, None) is not None for p in chain):
            return unchanged
        return (yield Blocking(partial(method, chain, **kwargs)))

    def _blocked(self, tripwire: Tripwire) -> EngineStep:
        turn = self.turn
        assert turn is not None
        content = list(self.conversation.new_input)
        if tripwire.phase in OUTPUT_PHASES or tripwire.phase == "input_step":
            content += self.draft
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
        yield Blocking(
            partial(
                self._save_blocked,
                result,
                tripwire_fields={
                    "tripwire": tripwire,
                    "agent_id": self.agent.id,
                    "thread_id": turn.thread_id,
                    "resource_id": turn.resource_id,
                    "messages": content,
                },
                record=self._record("blocked") if settings.RECORD_TURNS else None,
            )
        )
        if self.streaming:
            yield StreamEvent(type="tripwire", tripwire=tripwire, result=result)
        return result

    def _save_blocked(self, result: GenerateResult, **fields: Any) -> None:
        blocked_save(**fields)
        self.result = result
        self.saved = True

    # --- the model and tool loop ---------------------------------------------------------------

    def _model_loop(self, feedback: list[Message]) -> EngineStep:
        """Model, then tools, then model again, until an answer without tool calls or the step limit.
        Every call gets the step hooks; a retry of `process_output_step` re-runs that step."""
        turn = self.turn
        assert turn is not None
        responses: list[Message] = []
        step_feedback: list[Message] = []
        step = 0
        while step < self.agent.max_steps:
            if self.has_step_hooks:
                view = yield Blocking(
                    partial(self.runner.run_input_step, self.input_chain, step=step, responses=responses)
                )
                prompt = self.conversation.request_messages(
                    system=[*view.system, *feedback, *step_feedback], messages=view.messages
                )
            else:  # the conversation as the turn's hooks left it, already in order
                view = StepView(
                    self.conversation.system, self.conversation.messages, list(turn.tools.values())
                )
                prompt = self.conversation.request_messages(
                    system=[*view.system, *feedback, *step_feedback], responses=responses
                )
            self.last_prompt = prompt
            resolved = yield from self._resolve(prompt)
            request = ModelRequest(messages=resolved, tools=[t.spec for t in view.tools])
            self.steps += 1
            response = yield from self._model_step(request, responses)
            _add_usage(self.usage, response.usage)
            calls = [c if c.id else ToolCall(new_id(), c.name, c.args) for c in response.tool_calls]
            assistant = _assistant_message(response.text, calls, turn)
            drafted = [*responses, assistant] if assistant.parts else list(responses)
            self.draft = drafted
            try:
                drafted = yield from self._hooks(
                    "process_output_step",
                    self.runner.run_output_step,
                    self.output_chain,
                    drafted,
                    step=step,
                    responses=drafted,
                    tool_calls=calls,
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
                tool_span = telemetry.start_span(
                    f"execute_tool {call.name}",
                    parent=self.span,
                    attributes={
                        "gen_ai.operation.name": "execute_tool",
                        "gen_ai.tool.name": call.name,
                        "gen_ai.tool.call.id": call.id,
                    },
                )
                try:
                    part = yield Blocking(self._run_tool, (call,))
                    if part.is_error:
                        tool_span.set_attribute("error.type", "tool_error")
                finally:
                    tool_span.end()
                self.draft = [*responses, self._tool_message([*results, part])]
                part = yield from self._hooks(
                    "process_tool_result",
                    self.runner.run_tool_result,
                    self.tool_result_chain,
                    part,
                    step=step,
                    responses=responses,
                    result=part,
                )
                results.append(part)
                if self.streaming:
                    yield StreamEvent(type="tool-result", tool_result=part)
            responses = [*responses, self._tool_message(results)]
            self.draft = responses
            step += 1
        return responses

    def _tool_message(self, results: Sequence[ToolResultPart]) -> Message:
        turn = self.turn
        assert turn is not None
        return Message.create(
            "tool",
            tuple(results),
            thread_id=turn.thread_id,
            resource_id=turn.resource_id,
            created_at=timezone.now(),
        )

    def _resolve(self, messages: list[Message]) -> EngineStep:
        """Attachment references become URLs or bytes for the request only (what is saved keeps them).
        Resolved once per message object, so later steps cost no query; no references, no step."""
        todo = [m for m in messages if id(m) not in self._resolved]
        if not any(isinstance(p, AttachmentRef) for m in todo for p in m.parts):
            if not self._resolved:  # nothing resolved so far, nothing to resolve: the prompt as it is
                return list(messages)
            resolved = todo
        else:
            turn = self.turn
            assert turn is not None
            resolved = yield Blocking(
                partial(
                    attachments_resolve,
                    messages=todo,
                    resource_id=turn.resource_id,
                    model=self.agent.model,
                    staged=turn.attachments,
                )
            )
        for original, done in zip(todo, resolved, strict=True):
            self._resolved[id(original)] = (original, done)
        return [self._resolved[id(m)][1] for m in messages]

    def _model_step(self, request: ModelRequest, responses: list[Message]) -> EngineStep:
        """One model call, traced as `chat <model>` (OpenTelemetry GenAI semantic conventions)."""
        model = self.agent.model
        provider, _, name = str(getattr(model, "id", "") or self.agent.model_id).rpartition("/")
        span = telemetry.start_span(
            f"chat {name}",
            parent=self.span,
            client=True,
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": provider or None,
                "gen_ai.request.model": name,
                "memproc.step": self.steps,
            },
        )
        try:
            response = yield from self._model_call(model, request, responses)
            span.set_attributes(
                {
                    "gen_ai.usage.input_tokens": response.usage.get("prompt_tokens"),
                    "gen_ai.usage.output_tokens": response.usage.get("completion_tokens"),
                    "gen_ai.response.finish_reasons": [response.finish_reason],
                }
            )
            if settings.TRACE_CONTENT:
                span.set_attribute("gen_ai.output.text", response.text)
        except BaseException as exc:
            if not isinstance(exc, GeneratorExit):
                telemetry.fail(span, exc)
            raise
        finally:
            span.end()
        return response

    def _model_call(self, model: Any, request: ModelRequest, responses: list[Message]) -> EngineStep:
        if not self.streaming:
            return (yield ModelGenerate(model, request))
        if not (hasattr(model, "stream") or hasattr(model, "astream")):
            response = yield ModelGenerate(model, request)
            events = [StreamEvent(type="text-delta", text=response.text)] if response.text else []
            events += [StreamEvent(type="tool-call", tool_call=c) for c in response.tool_calls]
            events.append(
                StreamEvent(type="finish", usage=response.usage, finish_reason=response.finish_reason)
            )
            return (yield from self._stream_through_processors(iter(events), None, responses))
        handle = yield ModelStreamOpen(model, request)
        try:
            response = yield from self._stream_through_processors(None, handle, responses)
        except Exception:
            yield ModelStreamClose(handle)
            raise
        # (A closed engine leaves the stream to its driver, which closes every stream it opened.)
        yield ModelStreamClose(handle)
        return response

    def _stream_through_processors(
        self, events: Iterator[StreamEvent] | None, handle: Any, responses: list[Message]
    ) -> EngineStep:
        turn = self.turn
        assert turn is not None
        text: list[str] = []
        calls: list[ToolCall] = []
        usage: dict[str, Any] = {}
        finish = "stop"
        while True:
            event = next(events, None) if events is not None else (yield ModelStreamNext(handle))
            if event is None:
                break
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
                    self.draft = [*responses, _assistant_message("".join(text), [], turn)]
                yield part
        return ModelResponse(text="".join(text), tool_calls=calls, usage=usage, finish_reason=finish)

    def _run_tool(self, call: ToolCall) -> ToolResultPart:
        turn = self.turn
        assert turn is not None
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
            logs.failure(logger, "memproc: tool %s failed", call.name, extra=logs.current(), exc=exc)
            return ToolResultPart(call.id, call.name, f"{type(exc).__name__}: {exc}", is_error=True)
        return ToolResultPart(call.id, call.name, _jsonable(result))


def _send_turn_completed(*, result: GenerateResult, agent_id: str, record: dict[str, Any] | None) -> None:
    send_after_commit(
        turn_completed,
        TurnEngine,
        result=result,
        record_id=record["record_id"] if record is not None else None,
        agent_id=agent_id,
        thread_id=result.thread_id or "",
        resource_id=result.resource_id or "",
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
