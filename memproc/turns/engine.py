"""Turn orchestration: input processors, the model and tool loop with its step hooks, output
processors, one atomic save.

The turn itself is `TurnEngine.run()`, a generator that does no I/O of its own: it yields the
turn's stream events and, for every step that may block (the database, files, tools, user hooks) or
wait (the model), an *effect* (memproc.turns.effects), and receives the effect's result back. Two
drivers perform the effects: `memproc.turns.sync.turn_events` calls them directly, for
`Agent.generate`/`stream`; `memproc.turns.aio.turn_events_async` awaits the model natively and runs
blocking steps in worker threads that hold a database connection only for the step, so concurrent
`agenerate`/`astream` turns overlap (DESIGN §8). The turn's messages live in a `Conversation`
(memproc.processors.conversation), which keeps every model request valid; its writes are saved by
memproc.turns.commit.

This module is the turn's state machine: start (memproc.turns.start), the model and tool loop
(memproc.turns.loop, and memproc.turns.tool_steps, which runs tools with memproc.turns.tools), the
save or the blocked turn's log, the result and the turn record.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from functools import partial
from typing import Any

from django.utils import timezone

from memproc import logs, telemetry
from memproc.conf import settings
from memproc.events import GenerateResult, PendingCall, StreamEvent, Tripwire
from memproc.messages import Message, MessageInput
from memproc.processors.conversation import Conversation
from memproc.processors.message_history import MessageHistory, savable
from memproc.processors.runner import Blocked, ProcessorRunner
from memproc.processors.turn import Turn, TurnWrites
from memproc.processors.working_memory import WorkingMemory
from memproc.services.attachments import attachments_discard
from memproc.signals import send_after_commit, turn_completed
from memproc.turns.commit import blocked_save, turn_commit
from memproc.turns.effects import Blocking, EngineStep
from memproc.turns.input import ThreadRef, TurnInput
from memproc.turns.loop import ModelLoop, feedback_message
from memproc.turns.plan import TurnPlan
from memproc.turns.records import turn_record_alone
from memproc.turns.resume import Resumption, suspension_save
from memproc.turns.start import turn_start
from memproc.turns.stream_policy import StreamGate, screening_chain
from memproc.turns.tool_steps import Suspend

__all__ = ["TurnEngine"]

# Phases whose tripwire log holds the blocked response as well as the input (rule 20).
OUTPUT_PHASES = frozenset({"output_step", "tool_result", "output", "stream"})


class TurnEngine(ModelLoop):
    """One turn, as a generator of stream events and effects (see the module docstring).

    Code between effects is plain computation (message lists, the conversation object, stream hooks),
    so it may run on an event loop; everything that can block is a `Blocking` effect. Hook chains
    with no processor for a hook cost no effect. It reads its agent only through `plan`.
    """

    def __init__(
        self,
        plan: TurnPlan,
        messages: MessageInput | TurnInput,
        *,
        thread_id: str | None = None,
        resource_id: str | None = None,
        thread: ThreadRef | None = None,
        streaming: bool = False,
        replace_from: str | None = None,
        resume: Resumption | None = None,
    ) -> None:
        self.plan = plan
        # A suspended turn resumed after its waiting call was decided (memproc.turns.resume).
        self.resume = resume
        self.input_chain = plan.input_chain
        self.output_chain = plan.output_chain
        self.streaming = streaming
        # What reaches the client and when (memproc.turns.stream_policy); a turn that does not
        # stream emits no events, so its gate has nothing to hold.
        self.gate = StreamGate(plan.stream_policy if streaming else "live")
        self.screen_chain = screening_chain(self.output_chain) if self.gate.policy == "sentences" else []
        self.max_retries = plan.max_processor_retries
        self.max_api_retries = plan.max_api_error_retries
        self.retries = 0
        self.given = messages
        self.thread_id = thread_id
        self.resource_id = resource_id
        self.thread_ref = thread
        self.replace_from = replace_from
        self.turn: Turn | None = None
        self.usage: dict[str, Any] = dict(resume.usage) if resume is not None else {}
        self.steps = resume.steps if resume is not None else 0
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
        return turn_start(
            self.plan,
            self.given,
            thread_id=self.thread_id,
            resource_id=self.resource_id,
            thread=self.thread_ref,
            summaries=any(getattr(p, "compaction", None) is not None for p in self.input_chain),
            thread_memory=any(isinstance(p, WorkingMemory) and p.scope == "thread" for p in self.input_chain),
            history=max(
                (p.last_messages for p in self.input_chain if isinstance(p, MessageHistory)), default=0
            ),
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
        system = [self.plan.instructions] if self.plan.instructions is not None else []
        self.conversation = Conversation(
            system=[*system, *turn.system_input], messages=turn.input_messages, loaded_ids=turn.loaded_ids
        )
        self.runner = ProcessorRunner(turn, self.conversation)

    def run(self) -> EngineStep:
        """The turn, traced as `invoke_agent <agent id>`; a turn that fails leaves a failed record."""
        self.span = telemetry.start_span(
            f"invoke_agent {self.plan.agent_id}",
            parent=self._trace_parent,
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.id": self.plan.agent_id,
                "gen_ai.agent.name": self.plan.agent_name,
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
            "agent_id": self.plan.agent_id,
            "thread_id": turn.thread_id,
            "resource_id": turn.resource_id,
            "status": status,
            "model": self.plan.model_id,
            "steps": self.steps,
            "usage": dict(self.usage),
            "manifest": turn.info.manifest(),
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
        self._log_binding = logs.bind(
            agent_id=self.plan.agent_id,
            thread_id=self.thread_id,
            resource_id=self.resource_id,
            turn_id=self.record_id,
        )
        try:
            yield Blocking(self._begin)
        except Blocked as blocked:
            return (yield from self._blocked(blocked.tripwire))
        turn = self.turn
        assert turn is not None
        feedback: list[Message] = []
        vectors = turn.writes.vectors  # the recall query's, from the input processors: reused by the save
        while True:
            turn.writes = TurnWrites(vectors=vectors)
            if self.resume is not None:  # the changes the model made before the turn suspended
                turn.writes.working_memory = list(self.resume.working_memory)
            self.draft = []
            try:
                responses = yield from self._model_loop(feedback)
                record = yield Blocking(self._finish, (responses,))
            except Suspend as suspend:
                return (yield from self._suspended(suspend))
            except Blocked as blocked:
                tripwire = blocked.tripwire
                if tripwire.retry and tripwire.phase == "output" and self.retries < self.max_retries:
                    self.retries += 1
                    feedback = [feedback_message(tripwire)]
                    self.gate.drop()
                    if self.streaming:
                        yield StreamEvent(type="retry", tripwire=tripwire)
                    continue
                return (yield from self._blocked(tripwire))
            break
        result = self.result
        assert result is not None
        if turn_completed.receivers:
            yield Blocking(
                partial(_send_turn_completed, result=result, agent_id=self.plan.agent_id, record=record)
            )
        if self.streaming:
            yield from self.gate.release()  # the result guardrails passed
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
            turn_commit(
                turn,
                plan=self.plan,
                record=record,
                turn_id=self.record_id,
                resumed=self.resume.pending_id if self.resume is not None else None,
            )
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
            memory=turn.memory_report(),
        )
        self.saved = True
        return record

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
            memory=turn.memory_report(),
        )
        yield Blocking(
            partial(
                self._save_blocked,
                result,
                tripwire_fields={
                    "tripwire": tripwire,
                    "agent_id": self.plan.agent_id,
                    "thread_id": turn.thread_id,
                    "resource_id": turn.resource_id,
                    "messages": content,
                },
                record=self._record("blocked") if settings.RECORD_TURNS else None,
            )
        )
        self.gate.drop()  # what the policy still held of the blocked reply never leaves
        if self.streaming:
            yield StreamEvent(type="tripwire", tripwire=tripwire, result=result)
        return result

    def _save_blocked(self, result: GenerateResult, **fields: Any) -> None:
        blocked_save(**fields, resumed=self.resume.pending_id if self.resume is not None else None)
        self.result = result
        self.saved = True

    def _suspended(self, suspend: Suspend) -> EngineStep:
        """The turn stops at a call that waits: its PendingToolCall is written and nothing else (no
        message, no working memory); the result and the stream say what waits."""
        turn = self.turn
        assert turn is not None
        pending = yield Blocking(self._save_suspended, (suspend,))
        result = GenerateResult(
            text=_final_text(suspend.responses),
            messages=[],
            tripwire=None,
            usage=self.usage,
            thread_id=turn.thread_id,
            resource_id=turn.resource_id,
            prompt=self.last_prompt,
            steps=self.steps,
            memory=turn.memory_report(),
            pending=pending,
        )
        self.result = result
        self.gate.drop()  # held text is released with the turn's end, once its guardrails ran
        if self.streaming:
            if pending.kind == "approval":
                yield StreamEvent(type="tool-approval", tool_call=suspend.call, pending=pending)
            yield StreamEvent(type="suspended", result=result, pending=pending)
        return result

    def _save_suspended(self, suspend: Suspend) -> PendingCall:
        turn = self.turn
        assert turn is not None
        previous = self.resume.pending_id if self.resume is not None else None
        pending = suspension_save(
            turn, suspend, plan=self.plan, steps=self.steps, usage=self.usage, previous_id=previous
        )
        self.saved = True
        return pending


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


def _final_text(messages: list[Message]) -> str:
    for message in reversed(messages):
        if message.role == "assistant" and message.text:
            return message.text
    return ""
