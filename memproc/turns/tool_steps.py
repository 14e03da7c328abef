"""The tool half of a turn's model loop (memproc.turns.loop): one step's calls run in order, each
result through the `process_tool_result` hooks; a call that waits for a person suspends the turn, and
the call a resume decided takes its result from the decision."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from django.utils import timezone

from memproc import telemetry
from memproc.events import StreamEvent
from memproc.llm.types import ToolCall
from memproc.messages import Message, ToolResultPart
from memproc.processors.runner import ProcessorRunner
from memproc.processors.turn import Turn
from memproc.services.approvals import pending_record_run
from memproc.turns.effects import Blocking, EngineStep
from memproc.turns.resume import Resumption
from memproc.turns.stream_policy import StreamGate
from memproc.turns.tools import tool_run

__all__ = ["Suspend", "ToolSteps"]


class Suspend(Exception):  # noqa: N818 - a control signal of the loop, as Blocked is
    """A call that waits (approval, client-side): the turn stops before it, to resume later."""

    def __init__(
        self,
        *,
        call: ToolCall,
        tool: Any,
        calls: list[ToolCall],
        results: list[ToolResultPart],
        responses: list[Message],
        step: int,
    ) -> None:
        super().__init__(call.name)
        self.call, self.tool, self.calls, self.results = call, tool, calls, results
        self.responses, self.step = responses, step


class ToolSteps:
    """The loop's tool steps, as generator methods of the engine (see `ModelLoop`, which sets the
    attributes and provides `_hooks`)."""

    turn: Turn | None
    streaming: bool
    span: Any
    runner: ProcessorRunner
    tool_result_chain: list[Any]
    draft: list[Message]
    gate: StreamGate
    # The suspended turn this one resumes (memproc.turns.resume), or None.
    resume: Resumption | None = None
    _hooks: Callable[..., EngineStep]

    def _run_tools(
        self, to_run: list[ToolCall], results: list[ToolResultPart], responses: list[Message], step: int
    ) -> EngineStep:
        """Runs one step's calls in order after the `results` they have already; a call that waits
        (approval, client-side) suspends the turn there (`Suspend`), unless it is the call a resume
        decided, whose result comes from its decision."""
        turn = self.turn
        assert turn is not None
        results = list(results)
        answered = {r.tool_call_id for r in results}
        for call in to_run:
            if call.id in answered:
                continue
            resume = self.resume
            tool = turn.tools.get(call.name)
            if resume is not None and call.id == resume.tool_call_id:
                part = yield Blocking(self._decided_result, (call,))
            elif tool is not None and tool.waits is not None:
                raise Suspend(
                    call=call, tool=tool, calls=to_run, results=results, responses=responses, step=step
                )
            else:
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
                    part = yield Blocking(partial(tool_run, turn=turn), (call,))
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
                yield from self.gate.other(StreamEvent(type="tool-result", tool_result=part))
        return results

    def _decided_result(self, call: ToolCall) -> ToolResultPart:
        """The result of the call a resume decided (a blocking step): a rejection, the client's
        answer, the result a resume before this one recorded, or the tool run now, once, its result
        recorded before the turn goes on."""
        resume = self.resume
        turn = self.turn
        assert resume is not None and turn is not None
        if not resume.ran:
            part = tool_run(call, turn=turn)
            pending_record_run(pending_id=resume.pending_id, result=part.result, is_error=part.is_error)
            resume.ran, resume.result, resume.is_error = True, part.result, part.is_error
        return ToolResultPart(call.id, call.name, resume.result, is_error=resume.is_error)

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
