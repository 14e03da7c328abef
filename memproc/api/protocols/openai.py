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
* The views live here; the request translation (the body, client-side tools, messages, a `tool`
  message's answer) in `openai_request`; the response bodies, stream chunks and error bodies in
  `openai_render`.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

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
    turn_input_check,
    without_system,
)
from memproc.api.protocols.openai_render import (
    ChunkEncoder,
    completion_body,
    openai_error,
    replayed,
)
from memproc.api.protocols.openai_request import (
    ChatCompletionRequest,
    answered_call,
    client_tools_check,
    is_not_for_memory,
    memproc_message,
)
from memproc.api.serializers.fields import IdField
from memproc.api.sse import stream_response
from memproc.api.views.base import MemprocViewMixin, outside_request_transactions
from memproc.events import StreamEvent
from memproc.messages import new_id
from memproc.models import PendingToolCall
from memproc.services import approvals
from memproc.services.attachments import attachment_check_size
from memproc.turns.asgi import is_asgi, turn_events, turn_generate
from memproc.turns.input import ThreadRef

IGNORED_SYSTEM_HEADER = "X-Memproc-Ignored-System-Messages"


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


@extend_schema(exclude=True)
@outside_request_transactions
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


async def _async_events(events: list[StreamEvent]) -> AsyncIterator[StreamEvent]:
    """Events already made, as the async stream an ASGI response sends without a worker thread."""
    for event in events:
        yield event


def _metadata_id(name: str, value: str | None) -> str | None:
    """A thread or resource id from `metadata`, under the same rule as everywhere in the API."""
    if value is None:
        return None
    try:
        return IdField().run_validation(value)
    except serializers.ValidationError as exc:
        raise serializers.ValidationError({"metadata": {name: exc.detail}}) from exc
