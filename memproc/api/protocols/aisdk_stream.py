"""The AI SDK's UI-message stream protocol (v1) from a turn's stream events: `UIMessageStreamEncoder`
makes the chunks of one assistant message (SSE `data:` frames, then `data: [DONE]`), for a new turn or
for a resumed one that continues the message its client already shows. `aisdk` holds the views and
the request translation."""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from rest_framework.utils.encoders import JSONEncoder

from memproc.api.sse import error_data
from memproc.events import GenerateResult, StreamEvent
from memproc.llm.types import ToolCall
from memproc.messages import thaw

__all__ = ["UIMessageStreamEncoder", "chunk"]


def chunk(data: Mapping[str, Any]) -> bytes:
    payload = json.dumps(data, cls=JSONEncoder, ensure_ascii=False, separators=(",", ":"))
    return f"data: {payload}\n\n".encode()


class UIMessageStreamEncoder:
    """A turn's stream events as UI message chunks (one assistant message, one step per model call).

    A call that waits (`waiting_tools`: approval-gated and client-side ones) ends the turn's stream:
    the calls after it in its step run only once it is decided, so they are held back (shown when
    they get a result or wait in turn), and `useChat` sees a last step whose calls all have an answer
    or wait for one. A continued message (`continues`, a resumed turn) goes on in the client's last
    step: `announced` are the calls the client shows already, `held` those it does not, `denied` the
    rejected ones (`tool-output-denied`)."""

    def __init__(
        self,
        *,
        message_id: str,
        thread_id: str | None,
        hidden_tools: set[str],
        waiting_tools: Collection[str] = (),
        continues: bool = False,
        announced: Collection[str] = (),
        held: Sequence[ToolCall] = (),
        denied: Collection[str] = (),
    ) -> None:
        self.message_id = message_id
        self.thread_id = thread_id
        self.hidden_tools = hidden_tools
        self.waiting_tools = set(waiting_tools)
        self.announced = set(announced)
        self.held = {call.id: call for call in held if call.id not in self.announced}
        self.denied = set(denied)
        self.text_id: str | None = None
        self.texts = 0
        self.step_open = continues  # a continued message goes on in the client's last step
        self.step_started = False  # this stream sent the open step's `start-step`
        self.step_done = False  # the step's tools ran: the next model output is a new step
        self.step_waits = False  # a call of the open step waits: the calls after it are held

    def begin(self) -> list[bytes]:
        return [
            chunk(
                {
                    "type": "start",
                    "messageId": self.message_id,
                    "messageMetadata": {"thread_id": self.thread_id},
                }
            )
        ]

    def _close_text(self) -> list[dict[str, Any]]:
        if self.text_id is None:
            return []
        done, self.text_id = {"type": "text-end", "id": self.text_id}, None
        return [done]

    def _close_step(self) -> list[dict[str, Any]]:
        out = self._close_text()
        if self.step_open:
            if self.step_started:
                out.append({"type": "finish-step"})
            self.step_open = self.step_started = False
        return out

    def _step(self) -> list[dict[str, Any]]:
        out = self._close_step() if self.step_done else []
        self.step_done = False
        if not self.step_open:
            out.append({"type": "start-step"})
            self.step_open = self.step_started = True
            self.step_waits = False
        return out

    def _input(self, call_id: str, name: str, args: Any) -> dict[str, Any]:
        self.announced.add(call_id)
        self.held.pop(call_id, None)
        return {"type": "tool-input-available", "toolCallId": call_id, "toolName": name, "input": thaw(args)}

    def _shown(self, call_id: str, name: str, args: Any) -> list[dict[str, Any]]:
        """A call the client must know before its result or approval request: its input, in the open
        step (a held call belongs to the step it was made in)."""
        if call_id in self.announced:
            return []
        out: list[dict[str, Any]] = []
        if not self.step_open:
            out.append({"type": "start-step"})
            self.step_open = self.step_started = True
        return [*out, *self._close_text(), self._input(call_id, name, args)]

    def event(self, event: StreamEvent) -> list[bytes]:
        return [chunk(c) for c in self.chunks(event)]

    def chunks(self, event: StreamEvent) -> list[dict[str, Any]]:
        if event.type == "text-delta" and event.text:
            out = self._step()
            if self.text_id is None:
                self.texts += 1
                self.text_id = f"text-{self.texts}"
                out.append({"type": "text-start", "id": self.text_id})
            return [*out, {"type": "text-delta", "id": self.text_id, "delta": event.text}]
        if event.type == "tool-call" and event.tool_call is not None:
            call = event.tool_call
            if call.name in self.hidden_tools:
                return []
            out = self._step()
            if self.step_waits:  # runs only once the call before it is decided
                self.held[call.id] = call
                return out
            self.step_waits = call.name in self.waiting_tools
            return [*out, *self._close_text(), self._input(call.id, call.name, call.args)]
        if event.type == "tool-result" and event.tool_result is not None:
            self.step_done = True
            result = event.tool_result
            if result.tool_name in self.hidden_tools:
                return []
            held = self.held.get(result.tool_call_id)
            out = self._shown(held.id, held.name, held.args) if held is not None else []
            if result.tool_call_id in self.denied:
                return [*out, {"type": "tool-output-denied", "toolCallId": result.tool_call_id}]
            if result.is_error:
                text = result.result if isinstance(result.result, str) else json.dumps(thaw(result.result))
                failed = {"type": "tool-output-error", "toolCallId": result.tool_call_id, "errorText": text}
                return [*out, failed]
            return [
                *out,
                {
                    "type": "tool-output-available",
                    "toolCallId": result.tool_call_id,
                    "output": thaw(result.result),
                },
            ]
        if event.type == "tool-approval" and event.tool_call is not None and event.pending is not None:
            call = event.tool_call
            return [
                *self._shown(call.id, call.name, call.args),
                {"type": "tool-approval-request", "approvalId": event.pending.id, "toolCallId": call.id},
            ]
        if event.type == "suspended" and event.pending is not None:
            waiting = event.pending
            return [
                *self._shown(waiting.tool_call_id, waiting.tool_name, waiting.args),
                *self._close_step(),
                {
                    "type": "finish",
                    "finishReason": "tool-calls",
                    "messageMetadata": self.metadata(event.result),
                },
            ]
        if event.type == "retry" and event.tripwire is not None:
            return [*self._close_text(), {"type": "data-retry", "data": event.tripwire.as_dict()}]
        if event.type == "finish":
            return [
                *self._close_step(),
                {"type": "finish", "finishReason": "stop", "messageMetadata": self.metadata(event.result)},
            ]
        if event.type == "tripwire" and event.tripwire is not None:
            return [
                *self._close_text(),
                {"type": "data-tripwire", "data": event.tripwire.as_dict()},
                *self._close_step(),
                {
                    "type": "finish",
                    "finishReason": "content-filter",
                    "messageMetadata": self.metadata(event.result),
                },
            ]
        return []

    def metadata(self, result: GenerateResult | None) -> dict[str, Any]:
        if result is None:
            return {"thread_id": self.thread_id}
        return {
            "thread_id": result.thread_id or self.thread_id,
            "message_ids": [m.id for m in result.messages],
            "usage": thaw(result.usage),
            # The call a suspended turn waits on; null once none waits (metadata merges on continuing).
            "pending": result.pending.as_dict() if result.pending is not None else None,
        }

    def error(self, exc: BaseException) -> list[bytes]:
        return [chunk({"type": "error", "errorText": error_data(exc)["detail"]})]

    def end(self) -> list[bytes]:
        return [b"data: [DONE]\n\n"]
