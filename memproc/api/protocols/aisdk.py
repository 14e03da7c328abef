"""The Vercel AI SDK's chat protocol at `POST agents/<id>/chat/`: the request body of `useChat`'s
`DefaultChatTransport` (`{id, messages: UIMessage[], trigger, messageId}`) and its UI-message stream
protocol, v1 (header `x-vercel-ai-ui-message-stream: v1`; SSE `data:` frames, then `data: [DONE]`).
This module holds the views and the request translation; `aisdk_stream` makes the stream's chunks,
`aisdk_resume` reads a request that answers a waiting tool call.

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

from collections.abc import Mapping
from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status, views
from rest_framework.exceptions import NotFound
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from memproc.agents import get_agent
from memproc.api.parsers import MemprocJSONParser
from memproc.api.protocols.aisdk_resume import TOOL_DONE, ToolAnswer, is_tool_part, tool_answer
from memproc.api.protocols.aisdk_stream import UIMessageStreamEncoder
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
from memproc.api.sse import stream_response
from memproc.api.views.base import MemprocViewMixin, outside_request_transactions
from memproc.messages import new_id
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
@outside_request_transactions
class ChatView(ChatViewMixin, views.APIView):
    """`POST agents/<id>/chat/`: one turn, streamed in the AI SDK's UI-message stream protocol; or, when
    the request answers a call its turn waits on, that turn resumed and streamed."""

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
