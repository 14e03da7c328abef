"""The OpenAI Chat Completions protocol over memproc's agents, so the official `openai` clients work
with `base_url=".../api/memproc/v1"`.

* `model` is an agent id (`GET v1/models` lists them); `metadata["thread_id"]` names the thread (a new
  one when absent; its id comes back in the response's `metadata` and the `X-Memproc-Thread-Id`
  header); the resource is the caller's, as everywhere in memproc (`metadata["resource_id"]` for
  callers that may use several).
* Clients resend the whole conversation each turn; on a stored thread only what follows the last
  assistant message is new (`common.new_part`), so only the new messages are saved.
* The agent's own tools run on the server; their calls are not returned. A request's `tools` may
  list only the agent's client-side tools (a `Tool` without a function; the agent's definitions are
  what the model sees); any other tool is a 400.
* A turn that waits on a call (memproc.services.approvals) saves nothing yet and says so; the call is
  `metadata.pending` (a `PendingCall`: id, tool_name, tool_call_id, args, kind, expires_at), also in
  the `memproc` extension.
  - A client-side call is answered as OpenAI does: `message.tool_calls` (the model's call id, name and
    JSON arguments), `finish_reason: "tool_calls"`. The client resends the conversation with that
    assistant message and a `tool` message; closing `tool` messages that answer a pending client call
    of the thread (`answered_call`) are its result (the content as JSON when it parses, else the text;
    checked against the tool's `output_schema`: 400), the waiting turn resumes and saves the whole
    turn once, and the answer is what the model said after the result (streamed: replayed as
    chunks). A call no longer pending is a 409.
  - A call that waits for a person's decision is not for the client to run, so it is no `tool_calls`:
    `finish_reason` is "stop" and `content` is the model's text so far and a notice naming the call
    and its pending id (`openai_render.waiting_text`). It is decided at memproc's
    `POST pending/<id>/approve/` or `reject/`, which answer the resumed turn. A resent conversation
    holding that notice drops the exchange (`is_waiting`): the waiting turn saves its input itself.
* A blocked turn (tripwire) is `finish_reason: "content_filter"` with the reason in
  `message.refusal` (streamed: a last chunk with a `refusal` delta and that finish reason).
* Errors are OpenAI's `{"error": {"message", "type", "param", "code"}}` with the matching statuses, so
  the SDK raises its own exception classes (`NotFoundError` for an unknown model, ...).
* The views and the request translation live here; the response bodies, stream chunks and error
  bodies in `openai_render`.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

from django.db import transaction
from django.utils.decorators import method_decorator
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, views
from rest_framework.exceptions import NotFound
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from memproc.agents import all_agents, get_agent
from memproc.api.errors import memproc_exception_handler
from memproc.api.protocols.auth import ProtocolAuthMixin
from memproc.api.protocols.common import (
    THREAD_HEADER,
    drop_blocked,
    new_part,
    tool_results_check,
    turn_input_check,
    without_system,
)
from memproc.api.protocols.openai_render import (
    WAITING_NOTICE,
    ChunkEncoder,
    completion_body,
    openai_error,
    replayed,
)
from memproc.api.serializers.fields import IdField
from memproc.api.sse import stream_response
from memproc.api.views.base import MemprocViewMixin
from memproc.events import StreamEvent
from memproc.exceptions import PendingCallConflict
from memproc.messages import has_unstorable_text, new_id
from memproc.models import PendingToolCall
from memproc.services import approvals
from memproc.services.attachments import attachment_check_size
from memproc.turns.asgi import is_asgi, turn_events, turn_generate
from memproc.turns.input import ThreadRef

IGNORED_SYSTEM_HEADER = "X-Memproc-Ignored-System-Messages"
ROLES = ("system", "developer", "user", "assistant", "tool")


# --- errors ----------------------------------------------------------------------------------------


class ModelNotFound(NotFound):
    default_code = "model_not_found"


def openai_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    response = memproc_exception_handler(exc, context)
    if response is not None:
        response.data = {"error": openai_error(response.status_code, response.data)}
    return response


class OpenAIViewMixin(ProtocolAuthMixin, MemprocViewMixin):
    renderer_classes = [JSONRenderer]

    def get_exception_handler(self) -> Any:
        return openai_exception_handler

    def perform_content_negotiation(self, request: Request, force: bool = False) -> tuple[Any, str]:
        return JSONRenderer(), JSONRenderer.media_type

    def agent(self, agent_id: str) -> Any:
        try:
            return get_agent(agent_id)
        except LookupError as exc:
            raise ModelNotFound(
                f"The model `{agent_id}` does not exist or you do not have access to it."
            ) from exc


# --- models ----------------------------------------------------------------------------------------


def model_object(agent: Any) -> dict[str, Any]:
    return {
        "id": agent.id,
        "object": "model",
        "created": 0,
        "owned_by": "memproc",
        "name": agent.name,
        "description": agent.description,
    }


@extend_schema(exclude=True)
class ModelListView(OpenAIViewMixin, views.APIView):
    """`GET v1/models`: the registered agents, as OpenAI models."""

    def get(self, request: Request) -> Response:
        return Response({"object": "list", "data": [model_object(a) for a in all_agents()]})


@extend_schema(exclude=True)
class ModelDetailView(OpenAIViewMixin, views.APIView):
    """`GET v1/models/<id>`: one agent, as an OpenAI model."""

    def get(self, request: Request, id: str) -> Response:
        return Response(model_object(self.agent(id)))


# --- chat completions ------------------------------------------------------------------------------


class ChatCompletionRequest(serializers.Serializer):
    """The fields memproc reads; the model's sampling options are the agent's, so others are ignored."""

    model = serializers.CharField(max_length=255)
    messages = serializers.ListField(child=serializers.DictField(), allow_empty=False)
    stream = serializers.BooleanField(required=False, default=False, allow_null=True)
    stream_options = serializers.DictField(required=False, allow_null=True)
    metadata = serializers.DictField(
        child=serializers.CharField(max_length=512, allow_blank=True, trim_whitespace=False),
        required=False,
        allow_null=True,
    )
    n = serializers.IntegerField(required=False, allow_null=True, min_value=1, max_value=1)
    tools = serializers.ListField(required=False, allow_null=True)

    def validate_tools(self, value: list[Any] | None) -> list[Any] | None:
        for item in value or ():
            if tool_name(item) is None:
                raise serializers.ValidationError(
                    'Each tool must be {"type": "function", "function": {"name": ...}}, naming one of '
                    "the agent's client-side tools."
                )
        return value

    def validate_messages(self, value: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for message in value:
            if message.get("role") not in ROLES:
                raise serializers.ValidationError(
                    f"Unknown role {message.get('role')!r}; expected one of {', '.join(ROLES)}."
                )
        return value


def tool_name(item: Any) -> str | None:
    """The function name of one entry of a request's `tools`, or None for anything else."""
    if not isinstance(item, Mapping) or item.get("type") != "function":
        return None
    function = item.get("function")
    name = function.get("name") if isinstance(function, Mapping) else None
    return name if isinstance(name, str) and name else None


def client_tools_check(agent: Any, tools: list[Any] | None) -> None:
    """A request may list the agent's own client-side tools (the openai SDK's tool loops send the
    tools they run); the agent's definitions are the ones the model sees. Any other tool is a 400: the
    agent's other tools run on the server, and a tool it does not declare would never be offered."""
    own = sorted(t.name for t in agent.tools if t.waits == "client")
    for item in tools or ():
        name = tool_name(item)
        if name not in own:
            offered = ", ".join(own) if own else "none"
            raise serializers.ValidationError(
                {
                    "tools": [
                        f"`{name}` is not one of this agent's client-side tools ({offered}): memproc "
                        "agents run their own tools on the server, and a request may list only the "
                        "agent's client-side tools."
                    ]
                }
            )


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(p.get("text", "")) for p in content if isinstance(p, Mapping) and p.get("type") == "text"
        )
    return ""


def is_refusal(message: Mapping[str, Any]) -> bool:
    """An assistant message that is a block notice: a refusal and no content (what memproc answers for a
    tripwire, which clients append to the conversation they resend)."""
    return bool(message.get("refusal")) and not _text(message.get("content"))


def is_waiting(message: Mapping[str, Any]) -> bool:
    """An assistant message that says a call waits for approval: its exchange belongs to the waiting
    turn, which saves its input itself once the call is decided, so a resent copy is never saved."""
    return WAITING_NOTICE.search(_text(message.get("content"))) is not None


def is_not_for_memory(message: Mapping[str, Any]) -> bool:
    return is_refusal(message) or is_waiting(message)


def memproc_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """One OpenAI chat message as memproc's input (`memproc.messages.to_messages` reads OpenAI content
    parts and tool calls); an assistant's refusal and audio are not carried over."""
    role = message["role"]
    if role in ("system", "developer"):
        return {"role": role, "content": _text(message.get("content"))}
    if role == "assistant":
        out: dict[str, Any] = {"role": "assistant", "content": _text(message.get("content"))}
        if message.get("tool_calls"):
            out["tool_calls"] = message["tool_calls"]
        return out
    if role == "tool":
        return {
            "role": "tool",
            "tool_call_id": message.get("tool_call_id") or "",
            "content": _text(message.get("content")),
        }
    content = message.get("content")
    return {"role": "user", "content": content if isinstance(content, (str, list)) else ""}


@extend_schema(exclude=True)
@method_decorator(transaction.non_atomic_requests, name="dispatch")
class ChatCompletionsView(OpenAIViewMixin, views.APIView):
    """`POST v1/chat/completions`: one turn of the agent named by `model`, answered or streamed."""

    def post(self, request: Request) -> Any:
        attachment_check_size(content_length=request.META.get("CONTENT_LENGTH"))
        serializer = ChatCompletionRequest(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        agent = self.agent(data["model"])
        client_tools_check(agent, data.get("tools"))
        metadata = data.get("metadata") or {}
        thread_id = self.thread_id(metadata.get("thread_id") or None)
        resource_id, thread = self.settle_owner(
            thread_id, self.resource_id(metadata.get("resource_id") or None)
        )
        conversation = drop_blocked(data["messages"], is_not_for_memory)
        converted, ignored = without_system([memproc_message(m) for m in conversation])
        headers = {IGNORED_SYSTEM_HEADER: str(ignored)} if ignored else {}
        answer = answered_call(converted, agent=agent, resource_id=resource_id, thread_id=thread_id)
        if thread_id is None and agent.memory is not None:
            thread_id = new_id()
        if thread_id:
            headers[THREAD_HEADER] = thread_id
        completion_id, created = f"chatcmpl-{new_id()}", int(time.time())
        encoder = ChunkEncoder(
            completion_id=completion_id,
            created=created,
            model=agent.id,
            thread_id=thread_id,
            include_usage=bool((data.get("stream_options") or {}).get("include_usage")),
        )
        if answer is not None:
            pending, value = answer
            return self.resumed(
                request,
                pending,
                value,
                resource_id=resource_id,
                stream=bool(data.get("stream")),
                encoder=encoder,
                headers=headers,
            )
        part = new_part(converted, thread_exists=thread is not None, agent=agent)
        turn_input_check(
            part,
            resource_id=resource_id,
            unanswerable="The conversation must end with a new user message for the agent to answer.",
        )
        ref = ThreadRef.of(thread, thread_id=thread_id, resource_id=resource_id) if thread_id else None
        options = {"thread_id": thread_id, "resource_id": resource_id, "thread": ref}
        if data.get("stream"):
            return stream_response(turn_events(request, agent, part, **options), encoder, headers)
        result = turn_generate(request, agent, part, **options)
        body = completion_body(
            result, completion_id=completion_id, created=created, model=agent.id, thread_id=thread_id
        )
        return Response(body, headers=headers)

    def resumed(
        self,
        request: Request,
        pending: PendingToolCall,
        value: Any,
        *,
        resource_id: str,
        stream: bool,
        encoder: ChunkEncoder,
        headers: dict[str, str],
    ) -> Any:
        """The client's answer to the call its turn waits on: that turn resumes (it saves its own input,
        the call and this result, once), and the answer is what the model said after the result."""
        result = approvals.submit_result(pending.pk, result=value, resources=[resource_id])
        after = pending.tool_call_id
        if stream:
            events = replayed(result, after_call=after)
            source = _async_events(events) if is_asgi(request) else iter(events)
            return stream_response(source, encoder, headers)
        body = completion_body(
            result,
            completion_id=encoder.completion_id,
            created=encoder.created,
            model=encoder.model,
            thread_id=encoder.thread_id,
            after_call=after,
        )
        return Response(body, headers=headers)

    def thread_id(self, value: str | None) -> str | None:
        return _metadata_id("thread_id", value)

    def resource_id(self, value: str | None) -> str | None:
        return _metadata_id("resource_id", value)


def answered_call(
    messages: list[Mapping[str, Any]], *, agent: Any, resource_id: str, thread_id: str | None
) -> tuple[Any, Any] | None:
    """The client-side call of this thread that the conversation's closing `tool` messages answer,
    and the answer: the tool message's content, as JSON when it parses, else the text. None when they
    answer no such call (then the conversation is an ordinary turn's input). PendingCallConflict
    (409) for a call that is no longer pending; a 400 when the answer does not follow the assistant
    message holding the call, or holds what cannot be stored."""
    closing: dict[str, Mapping[str, Any]] = {}
    for message in reversed(messages):
        if message.get("role") != "tool":
            break
        closing.setdefault(str(message.get("tool_call_id") or ""), message)
    if not closing or not any(t.waits == "client" for t in agent.tools):
        return None  # no query for an agent with no client-side tool
    calls = approvals.client_calls_in_thread(
        list(closing), agent_id=agent.id, thread_id=thread_id or "", resource_id=resource_id
    )
    if not calls:
        return None
    # The waiting one, if any (newest first otherwise): an id the model reused names an older call too.
    pending = min(calls, key=lambda c: c.state != PendingToolCall.State.PENDING)
    if pending.state != PendingToolCall.State.PENDING:
        raise PendingCallConflict("This tool call is no longer pending: its turn has its result.")
    tool_results_check(messages, thread_exists=False)  # the call must be in the conversation
    value = _tool_result(closing[pending.tool_call_id].get("content"))
    if has_unstorable_text(value):
        raise serializers.ValidationError(
            {"messages": ["NUL characters and lone surrogates are not allowed."]}
        )
    return pending, value


async def _async_events(events: list[StreamEvent]) -> AsyncIterator[StreamEvent]:
    """Events already made, as the async stream an ASGI response sends without a worker thread."""
    for event in events:
        yield event


def _tool_result(content: Any) -> Any:
    """A tool message's content as the result: JSON when it parses as standard JSON (not NaN or
    Infinity, which no database stores as JSON), else the text."""
    text = _text(content)
    try:
        return json.loads(text, parse_constant=_not_json)
    except ValueError:
        return text


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def _metadata_id(name: str, value: str | None) -> str | None:
    """A thread or resource id from `metadata`, under the same rule as everywhere in the API."""
    if value is None:
        return None
    try:
        return IdField().run_validation(value)
    except serializers.ValidationError as exc:
        raise serializers.ValidationError({"metadata": {name: exc.detail}}) from exc
