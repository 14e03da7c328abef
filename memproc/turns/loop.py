"""The model and tool loop of a turn: model, then tools, then model again, with the step hooks, the
attachments resolved for each request and the model's stream passed through the output processors.

`ModelLoop` is the part of `TurnEngine` (memproc.turns.engine) that runs between the turn's start and
its save; like the rest of the engine it does no I/O of its own, only yields effects. Its tool steps
are in memproc.turns.tool_steps."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import Any

from django.utils import timezone

from memproc import telemetry
from memproc.conf import settings
from memproc.events import StreamEvent, Tripwire
from memproc.exceptions import ModelError
from memproc.llm.types import ModelRequest, ModelResponse, ToolCall
from memproc.messages import AttachmentRef, Message, TextPart, ToolCallPart, ToolResultPart, new_id
from memproc.processors.conversation import Conversation
from memproc.processors.parallel import with_hook
from memproc.processors.runner import Blocked, StepView
from memproc.processors.turn import Turn
from memproc.services.attachments import attachments_resolve
from memproc.turns.effects import (
    Blocking,
    EngineStep,
    ModelGenerate,
    ModelStreamClose,
    ModelStreamNext,
    ModelStreamOpen,
)
from memproc.turns.plan import TurnPlan
from memproc.turns.tool_steps import ToolSteps

__all__ = ["FEEDBACK", "ModelLoop", "feedback_message"]

FEEDBACK = (
    "[Processor Feedback] Your previous response was not accepted: {reason}. "
    "Please write a new response that addresses this feedback."
)


class ModelLoop(ToolSteps):
    """The model and tool loop, as generator methods of the engine. The attributes (these and
    `ToolSteps`') are the engine's state that the loop reads and writes; `TurnEngine` sets them up
    before the loop runs."""

    plan: TurnPlan
    conversation: Conversation
    input_chain: Sequence[Any]
    output_chain: Sequence[Any]
    has_step_hooks: bool
    retries: int
    max_retries: int
    max_api_retries: int
    steps: int
    usage: dict[str, Any]
    last_prompt: list[Message]
    screen_chain: list[Any]
    _resolved: dict[int, tuple[Message, Message]]
    # Whether the model call under way passed a stream part on (to the gate, so maybe the client).
    call_output: bool = False

    def _model_loop(self, feedback: list[Message]) -> EngineStep:
        """Model, then tools, then model again, until an answer without tool calls or the step limit.
        Every call gets the step hooks; a retry of `process_output_step` re-runs that step."""
        turn = self.turn
        assert turn is not None
        responses: list[Message] = []
        step_feedback: list[Message] = []
        step = 0
        # A resumed turn starts in the step it suspended in, with that step's calls still to run.
        carried: tuple[list[ToolCall], list[ToolResultPart]] | None = None
        resume = self.resume
        if resume is not None:
            responses, step = list(resume.responses), resume.step
            carried = (list(resume.calls), list(resume.results))
        while step < self.plan.max_steps:
            if carried is not None:
                to_run, results = carried
                carried = None
                results = yield from self._run_tools(to_run, results, responses, step)
                responses = [*responses, self._tool_message(results)]
                self.draft = responses
                step += 1
                continue
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
            response = yield from self._recovering_step(request, responses, step)
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
                    step_feedback = [feedback_message(tripwire)]
                    self.gate.drop()
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
                    yield from self.gate.other(StreamEvent(type="tool-call", tool_call=call))
            if not to_run:
                break
            results = yield from self._run_tools(to_run, [], responses, step)
            responses = [*responses, self._tool_message(results)]
            self.draft = responses
            step += 1
        return responses

    def _recovering_step(self, request: ModelRequest, responses: list[Message], step: int) -> EngineStep:
        """One model call. A `ModelError` goes to the `process_api_error` hooks, which may return a
        changed request to retry with; the retries count with the output processors' (`retries`),
        up to `max_api_retries`. A stream that already passed a part on is not retried (the client
        may have read it), as the SDK's own retries never retry one after its first chunk."""
        while True:
            self.steps += 1
            self.call_output = False
            try:
                return (yield from self._model_step(request, responses))
            except ModelError as error:
                retry = yield from self._api_error(error, request, step)
                if retry is None:
                    raise
                request = retry
                kept = {m.id for m in retry.messages}
                self.last_prompt = [m for m in self.last_prompt if m.id in kept]

    def _api_error(self, error: ModelError, request: ModelRequest, step: int) -> EngineStep:
        """The request to retry with, or None: no hook, no retry left, or no hook asked for one."""
        chain = self.tool_result_chain  # every processor once, input side first
        if not with_hook(chain, "process_api_error"):
            return None
        if self.streaming and self.call_output:
            return None
        if self.retries >= self.max_api_retries:
            error.add_note(
                f"memproc: no retry left for process_api_error: the turn used {self.retries} of "
                f"{self.max_api_retries} (max_processor_retries)"
            )
            return None
        retry = yield Blocking(
            partial(self.runner.run_api_error, chain, step=step, request=request, error=error)
        )
        if retry is not None:
            self.retries += 1
        return retry

    def _hooks(
        self, hook: str, method: Callable[..., Any], chain: Sequence[Any], unchanged: Any, **kwargs: Any
    ) -> EngineStep:
        """Runs a hook chain as one blocking step; when no processor has the hook, no step at all."""
        if not any(getattr(p, hook, None) is not None for p in chain):
            return unchanged
        return (yield Blocking(partial(method, chain, **kwargs)))

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
                    model=self.plan.model,
                    staged=turn.attachments,
                )
            )
        for original, done in zip(todo, resolved, strict=True):
            self._resolved[id(original)] = (original, done)
        return [self._resolved[id(m)][1] for m in messages]

    def _model_step(self, request: ModelRequest, responses: list[Message]) -> EngineStep:
        """One model call, traced as `chat <model>` (OpenTelemetry GenAI semantic conventions)."""
        model = self.plan.model
        provider, _, name = str(getattr(model, "id", "") or self.plan.model_id).rpartition("/")
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
        self.gate.step(partial(self._screen, responses) if self.screen_chain else None)
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
                self.call_output = True
                if part.type == "text-delta":
                    text.append(part.text)
                    self.draft = [*responses, _assistant_message("".join(text), [], turn)]
                    yield from self.gate.text(part)
                else:
                    yield from self.gate.other(part)
        return ModelResponse(text="".join(text), tool_calls=calls, usage=usage, finish_reason=finish)

    def _screen(self, responses: list[Message], text: str) -> None:
        """Under stream_policy="sentences": the screening guardrails' result hook on the model's text
        so far, before it is released (blocking: a guardrail may ask a judge model). An abort blocks
        the turn as the same hook would at its end; what it returns is not kept."""
        turn = self.turn
        assert turn is not None
        self.runner.run_output(self.screen_chain, responses=[*responses, _assistant_message(text, [], turn)])


def feedback_message(tripwire: Tripwire) -> Message:
    """The system message that tells the model why its response was refused, for a retry."""
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


def _add_usage(total: dict[str, Any], usage: dict[str, Any]) -> None:
    for key, value in (usage or {}).items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            total[key] = total.get(key, 0) + value
