"""The Vercel AI SDK's chat protocol at `POST agents/<id>/chat/`: the request body of `useChat`'s
`DefaultChatTransport` (`{id, messages: UIMessage[], trigger, messageId}`) and its UI-message stream
protocol, v1 (header `x-vercel-ai-ui-message-stream: v1`; SSE `data:` frames, then `data: [DONE]`).

* The chat `id` is the thread id; UI message ids are kept as message ids.
* The stream: `start` (with the response's `messageId` and `{"thread_id"}` metadata), per model step
  `start-step` … `finish-step` holding `text-start`/`text-delta`/`text-end` and, for the agent's own
  tools (run on the server), `tool-input-available` and `tool-output-available` (or
  `tool-output-error`), then `finish` (metadata: thread id, saved message ids, usage).
* A tripwire is a `data-tripwire` part (the tripwire's fields) followed by `finish` with
  `finishReason: "content-filter"`; nothing of the turn is saved. An output guardrail's retry is a
  `data-retry` part: the text before it was rejected and a new attempt follows.
* An error mid-turn is an `error` part (nothing saved). Errors before the turn starts (bad input, an
  unknown agent, another owner's thread) are ordinary JSON responses with their statuses.
* `trigger: "regenerate-message"`, or a `messageId` naming an already answered user message (an
  edit), replaces that message and everything after it in the thread.
* Calls that wait (memproc.services.approvals): a turn that suspends at an approval-gated tool ends
  its stream with the call's `tool-input-available`, then `tool-approval-request` (`approvalId`: the
  PendingToolCall's id), then `finish` with `finishReason: "tool-calls"` and the call in the
  metadata's `pending`; at a client-side tool, with `tool-input-available` only (`useChat`'s
  `onToolCall` fires). Calls after the waiting one in its step are shown once they run. Nothing is
  saved yet.
* The answer (memproc.api.protocols.aisdk_resume): a request whose last message is that assistant
  message with the tool part `approval-responded` (`addToolApprovalResponse`) approves or rejects the
  call as the signed-in user; with a client call's `output-available` / `output-error` part
  (`addToolOutput`), that is its result. The resumed turn streams back as the continuation of the same
  message (the same `messageId`; a rejected call is `tool-output-denied`) and saves the whole turn
  once. 403: the user may not decide the call; 404: no such call in this chat; 409: no longer
  pending; 400: a result the tool's `output_schema` refuses.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from django.db import transaction
from django.utils.decorators import method_decorator
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status, views
from rest_framework.exceptions import NotFound
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.encoders import JSONEncoder

from memproc.agents import get_agent
from memproc.api.parsers import MemprocJSONParser
from memproc.api.protocols.aisdk_resume import TOOL_DONE, ToolAnswer, is_tool_part, tool_answer
from memproc.api.protocols.auth import ProtocolAuthMixin
from memproc.api.protocols.common import (
    THREAD_HEADER,
    drop_blocked,
    internal_tools,
    new_part,
    turn_input_check,
    waiting_tools,
    without_system,
)
from memproc.api.serializers.fields import IdField
from memproc.api.sse import error_data, stream_response
from memproc.api.views.base import MemprocViewMixin
from memproc.events import GenerateResult, StreamEvent
from memproc.llm.types import ToolCall
from memproc.messages import new_id, thaw
from memproc.selectors.messages import messages_existing
from memproc.services.attachments import attachment_check_size
from memproc.turns.asgi import turn_events, turn_resume_events
from memproc.turns.input import ThreadRef
from memproc.turns.resume import Resumption

STREAM_HEADER = "x-vercel-ai-ui-message-stream"
UI_ROLES = ("system", "user", "assistant")


class ChatRequest(serializers.Serializer):
    id = IdField(help_text="The chat id, which is the thread id.")
    messages = serializers.ListField(child=serializers.DictField(), allow_empty=False)
    trigger = serializers.ChoiceField(
        choices=["submit-message", "regenerate-message"], required=False, default="submit-message"
    )
    messageId = serializers.CharField(required=False, allow_null=True, max_length=255)  # noqa: N815
    resource_id = IdField(required=False, allow_null=True, help_text="The owner; defaults to the caller's.")

    def validate_messages(self, value: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for message in value:
            message_id = message.get("id")
            if not isinstance(message_id, str) or not 0 < len(message_id) <= 255:
                raise serializers.ValidationError("Every UI message needs an id of 1 to 255 characters.")
            if message.get("role") not in UI_ROLES:
                raise serializers.ValidationError(
                    f"Unknown role {message.get('role')!r}; expected one of {', '.join(UI_ROLES)}."
                )
            parts = message.get("parts")
            if not isinstance(parts, list) or not all(isinstance(p, Mapping) for p in parts):
                raise serializers.ValidationError("A UI message's parts must be a list of objects.")
        return value


# --- UI messages to memproc's ----------------------------------------------------------------------


def is_block_notice(message: Mapping[str, Any]) -> bool:
    """The assistant message of a blocked turn: it holds the stream's `data-tripwire` part."""
    return any(p.get("type") == "data-tripwire" for p in message.get("parts") or ())


def _tool_name(part: Mapping[str, Any]) -> str:
    return str(part.get("toolName") or str(part.get("type", ""))[len("tool-") :])


def _file_part(part: Mapping[str, Any]) -> dict[str, Any]:
    url = str(part.get("url") or "")
    out: dict[str, Any] = {
        "type": "file",
        "media_type": str(part.get("mediaType") or "application/octet-stream"),
        "name": part.get("filename"),
    }
    out["data" if url.startswith("data:") else "url"] = url
    return out


def memproc_messages(ui: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One UI message as memproc messages. A user message keeps its id, text and files; an assistant
    message becomes, per step, an assistant message (text and tool calls) and a tool message (the
    results), as memproc stores a turn. Data, source and reasoning parts are not carried over."""
    role, parts = ui["role"], ui.get("parts") or []
    if role == "system":
        text = "".join(str(p.get("text", "")) for p in parts if p.get("type") == "text")
        return [{"role": "system", "content": text}]
    if role == "user":
        kept = [
            {"type": "text", "text": str(p.get("text", ""))} if p.get("type") == "text" else _file_part(p)
            for p in parts
            if p.get("type") in ("text", "file")
        ]
        return [{"id": ui["id"], "role": "user", "parts": kept}]
    steps: list[list[Mapping[str, Any]]] = [[]]
    for part in parts:
        if part.get("type") == "step-start":
            steps.append([])
        else:
            steps[-1].append(part)
    out: list[dict[str, Any]] = []
    for step in steps:
        text = "".join(str(p.get("text", "")) for p in step if p.get("type") == "text")
        calls: list[dict[str, Any]] = []
        results: list[dict[str, Any]] = []
        for part in step:
            if not is_tool_part(part) or part.get("state") not in TOOL_DONE:
                continue
            call_id, name = str(part.get("toolCallId", "")), _tool_name(part)
            args = part.get("input")
            calls.append(
                {
                    "type": "tool-call",
                    "tool_call_id": call_id,
                    "tool_name": name,
                    "args": args if isinstance(args, Mapping) else {"value": args},
                }
            )
            failed = part.get("state") == "output-error"
            results.append(
                {
                    "type": "tool-result",
                    "tool_call_id": call_id,
                    "tool_name": name,
                    "result": part.get("errorText") if failed else part.get("output"),
                    "is_error": failed,
                }
            )
        content = ([{"type": "text", "text": text}] if text else []) + calls
        if content:
            message: dict[str, Any] = {"role": "assistant", "parts": content}
            if not out:
                message["id"] = ui["id"]
            out.append(message)
        if results:
            out.append({"role": "tool", "parts": results})
    return out


# --- the stream ------------------------------------------------------------------------------------


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


# --- views -----------------------------------------------------------------------------------------


class ChatViewMixin(ProtocolAuthMixin, MemprocViewMixin):
    parser_classes = [MemprocJSONParser]
    renderer_classes = [JSONRenderer]

    def perform_content_negotiation(self, request: Request, force: bool = False) -> tuple[Any, str]:
        """Errors are JSON whatever the client accepts."""
        return JSONRenderer(), JSONRenderer.media_type

    def agent(self, agent_id: str) -> Any:
        try:
            return get_agent(agent_id)
        except LookupError as exc:
            raise NotFound(str(exc)) from exc


@extend_schema(exclude=True)
@method_decorator(transaction.non_atomic_requests, name="dispatch")
class ChatView(ChatViewMixin, views.APIView):
    """`POST agents/<id>/chat/`: one turn, streamed in the AI SDK's UI-message stream protocol."""

    def post(self, request: Request, id: str) -> Any:
        agent = self.agent(id)
        attachment_check_size(content_length=request.META.get("CONTENT_LENGTH"))
        serializer = ChatRequest(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        thread_id = data["id"]
        resource_id, thread = self.settle_owner(thread_id, data.get("resource_id"))
        answer = tool_answer(
            data["messages"][-1],
            user=request.user,
            agent_id=agent.id,
            thread_id=thread_id,
            resource_id=resource_id,
        )
        if answer is not None:
            return self.resumed(request, agent, answer, thread_id=thread_id)
        conversation = drop_blocked(data["messages"], is_block_notice)
        ui_part = new_part(conversation, thread_exists=thread is not None, agent=agent)
        replaces = self.replaced_from(thread, ui_part, data) if thread is not None else None
        part, _ = without_system([m for ui in ui_part for m in memproc_messages(ui)])
        turn_input_check(
            part,
            resource_id=resource_id,
            unanswerable="The chat must end with a new user message for the agent to answer.",
        )
        encoder = UIMessageStreamEncoder(
            message_id=new_id(),
            thread_id=thread_id,
            hidden_tools=internal_tools(agent),
            waiting_tools=waiting_tools(agent),
        )
        events = turn_events(
            request,
            agent,
            part,
            thread_id=thread_id,
            resource_id=resource_id,
            thread=ThreadRef.of(thread, thread_id=thread_id, resource_id=resource_id),
            replace_from=replaces,
        )
        return stream_response(events, encoder, {STREAM_HEADER: "v1", THREAD_HEADER: thread_id})

    def resumed(self, request: Request, agent: Any, answer: ToolAnswer, *, thread_id: str) -> Any:
        """The turn of the call the request decided, resumed and streamed as the continuation of the
        assistant message that answered it (same `messageId`, in its last step)."""
        pending = answer.pending
        encoder = UIMessageStreamEncoder(
            message_id=answer.message_id,
            thread_id=thread_id,
            hidden_tools=internal_tools(agent),
            waiting_tools=waiting_tools(agent),
            continues=True,
            announced=answer.shown,
            held=Resumption.of(pending).calls,
            denied={pending.tool_call_id} if answer.denied else (),
        )
        events = turn_resume_events(request, agent, pending)
        return stream_response(events, encoder, {STREAM_HEADER: "v1", THREAD_HEADER: thread_id})

    def replaced_from(self, thread: Any, ui_part: list[Any], data: Mapping[str, Any]) -> str | None:
        """A new-looking user message that the thread already holds: on regenerate (or an edit, which
        names it in `messageId`) the turn replaces it and what follows it (in the transaction that
        saves the turn, so a failed or blocked turn leaves them); otherwise it is a repeat, a 400."""
        ids = [m["id"] for m in ui_part if m.get("role") == "user"]
        here = (thread.resource_id, thread.public_id)
        found = messages_existing(resource_id=thread.resource_id, ids=ids)
        stored = [i for i, where in found.items() if where == here]
        if not stored:
            return None
        first = next(i for i in ids if i in stored)
        if data["trigger"] == "regenerate-message" or data.get("messageId") in stored:
            return first
        raise serializers.ValidationError(
            {
                "messages": [
                    f"Message {first!r} is already in this chat; send trigger "
                    '"regenerate-message" to answer it again.'
                ]
            }
        )


@extend_schema(exclude=True)
class ChatStreamView(ChatViewMixin, views.APIView):
    """`GET agents/<id>/chat/<chat id>/stream`, where `useChat({resume: true})` looks for a stream to
    resume: memproc keeps none (a turn whose client went away is cancelled), so always 204."""

    def get(self, request: Request, id: str, chat_id: str) -> Response:
        self.agent(id)
        return Response(status=status.HTTP_204_NO_CONTENT)
