"""Agents: the registry, and a turn as JSON (`generate`) or as Server-Sent Events (`stream`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema
from rest_framework import serializers, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from memproc.agents import all_agents, get_agent
from memproc.api.errors import memproc_exception_handler
from memproc.api.idempotency import (
    IDEMPOTENCY_KEY_PARAMETER,
    IDEMPOTENCY_RESPONSES,
    idempotent_response,
    idempotent_stream,
)
from memproc.api.parsers import MemprocJSONParser, MemprocMultiPartParser
from memproc.api.serializers.agents import AgentSerializer
from memproc.api.serializers.turns import (
    GenerateRequestSerializer,
    GenerateResultSerializer,
    GenerateUploadSerializer,
    generate_result_data,
)
from memproc.api.sse import CONTENT_TYPE, SSEEncoder, stream_response
from memproc.api.views.base import MemprocViewMixin, errors, id_parameter, outside_request_transactions
from memproc.api.views.checks import attachments_check
from memproc.conf import settings as memproc_settings
from memproc.exceptions import AttachmentError
from memproc.messages import FilePart, Message, new_id
from memproc.services.attachments import attachment_check_size
from memproc.services.messages import input_ids_check
from memproc.turns.asgi import turn_events, turn_generate
from memproc.turns.input import ThreadRef, TurnInput

STREAM_DESCRIPTION = """Runs one turn and streams it as Server-Sent Events (`text/event-stream`).

Each event is `event: <type>` and `data: <one line of JSON>`:

* `text-delta` — `{"text"}`, a piece of the answer;
* `tool-call` — `{"id", "name", "args"}`;
* `tool-result` — `{"tool_call_id", "tool_name", "result", "is_error"}`;
* `retry` — `{"tripwire"}`: an output guardrail rejected the text streamed so far; discard it, a new
  attempt follows;
* `finish` — the turn's result, the same object `generate` answers; the stream ends;
* `tripwire` — a blocked turn's result (`tripwire` set, nothing saved); the stream ends;
* `error` — `{"detail", "code"}`: the turn failed midway and nothing of it was saved; the stream ends.

The turn runs up to its first event before the response starts, so invalid input, an unknown agent,
another owner's thread, an oversized file or a model that is down answer a normal JSON 400/404/413/502."""

STREAM_EXAMPLE = (
    'event: text-delta\ndata: {"text":"Hello"}\n\n'
    'event: finish\ndata: {"text":"Hello","messages":[...],"tripwire":null,...}\n\n'
)


SSE_EVENT_SCHEMA = {
    "type": "object",
    "description": "One Server-Sent Event.",
    "properties": {
        "event": {
            "type": "string",
            "enum": ["text-delta", "tool-call", "tool-result", "retry", "finish", "tripwire", "error"],
        },
        "data": {"type": "string", "description": "One line of JSON; see the operation's description."},
    },
    "required": ["event", "data"],
}


@dataclass(frozen=True)
class TurnRequest:
    """A turn's request, resolved once: its input and its thread (None for an agent without memory,
    which has none), handed to the turn as they are."""

    given: TurnInput
    thread: ThreadRef | None
    thread_id: str | None
    resource_id: str
    thread_key: str | None  # the stored thread's key; None: no such thread yet

    def check_message_ids(self) -> None:
        """409 for a client-chosen id that is stored with other content or in another thread."""
        if self.given.client_ids:
            input_ids_check(
                resource_id=self.resource_id,
                thread_key=self.thread_key,
                messages=self.given.messages,
                client_ids=self.given.client_ids,
            )

    def options(self) -> dict[str, Any]:
        return {"thread_id": self.thread_id, "resource_id": self.resource_id, "thread": self.thread}


@extend_schema(tags=["agents"])
@outside_request_transactions
class AgentViewSet(MemprocViewMixin, viewsets.ViewSet):
    """Registered agents. Turns run outside any request-wide transaction (ATOMIC_REQUESTS): a turn
    owns its save, and a blocked turn's tripwire log must survive. Turns take JSON, or multipart
    forms whose `files` join the last user message."""

    parser_classes = [MemprocJSONParser, MemprocMultiPartParser]

    @extend_schema(
        summary="List the registered agents", responses={200: AgentSerializer(many=True), **errors()}
    )
    def list(self, request: Request) -> Response:
        return Response(AgentSerializer(all_agents(), many=True).data)

    @extend_schema(
        summary="One agent",
        parameters=[id_parameter("The agent id.")],
        responses={200: AgentSerializer, **errors(404)},
    )
    def retrieve(self, request: Request, id: str) -> Response:
        return Response(AgentSerializer(self.agent(id)).data)

    @extend_schema(
        summary="Run one turn and answer its result",
        description="A blocked turn is a normal 200 with `tripwire` set and `text` empty; nothing is saved.",
        parameters=[id_parameter("The agent id."), IDEMPOTENCY_KEY_PARAMETER],
        request={
            "application/json": GenerateRequestSerializer,
            "multipart/form-data": GenerateUploadSerializer,
        },
        responses={
            200: GenerateResultSerializer,
            **errors(400, 404, 409, 413, 502, 503),
            **IDEMPOTENCY_RESPONSES,
        },
    )
    @action(detail=True, methods=["post"])
    def generate(self, request: Request, id: str) -> Response:
        agent = self.agent(id)
        turn = self.turn_request(request, agent)

        def run() -> Response:
            turn.check_message_ids()
            result = turn_generate(request, agent, turn.given, **turn.options())
            return Response(generate_result_data(result))

        return idempotent_response(
            request, endpoint=f"agents/{agent.id}/generate", resources=self.allowed_resources, run=run
        )

    @extend_schema(
        summary="Run one turn as Server-Sent Events",
        description=STREAM_DESCRIPTION,
        parameters=[id_parameter("The agent id."), IDEMPOTENCY_KEY_PARAMETER],
        request={
            "application/json": GenerateRequestSerializer,
            "multipart/form-data": GenerateUploadSerializer,
        },
        responses={
            (200, CONTENT_TYPE): OpenApiResponse(
                SSE_EVENT_SCHEMA,
                description="The turn's events, one schema per event.",
                examples=[OpenApiExample("A short answer", value=STREAM_EXAMPLE)],
            ),
            **errors(400, 404, 409, 413, 502, 503),
            **IDEMPOTENCY_RESPONSES,
        },
    )
    @action(detail=True, methods=["post"])
    def stream(self, request: Request, id: str) -> Any:
        agent = self.agent(id)
        turn = self.turn_request(request, agent)

        def run(render_result: Any, result_box: list[Any]) -> Any:
            turn.check_message_ids()
            events = turn_events(request, agent, turn.given, result_box=result_box, **turn.options())
            return stream_response(events, SSEEncoder(render_result))

        return idempotent_stream(
            request,
            endpoint=f"agents/{agent.id}/stream",
            resources=self.allowed_resources,
            run=run,
            render_result=generate_result_data,
        )

    def get_exception_handler(self) -> Any:
        return memproc_exception_handler

    def perform_content_negotiation(self, request: Request, force: bool = False) -> tuple[Any, str]:
        """The stream's errors are JSON even for a client that accepts only `text/event-stream`."""
        if getattr(self, "action", None) == "stream":
            return JSONRenderer(), JSONRenderer.media_type
        return super().perform_content_negotiation(request, force)

    # --- helpers -----------------------------------------------------------------------------------

    def agent(self, agent_id: str) -> Any:
        try:
            return get_agent(agent_id)
        except LookupError as exc:
            raise NotFound(str(exc)) from exc

    def turn_request(self, request: Request, agent: Any) -> TurnRequest:
        """Validated input with the resource settled: the thread's owner when it exists, else the
        given or default resource. Another owner's thread or resource is a 404."""
        attachment_check_size(content_length=request.META.get("CONTENT_LENGTH"))  # 413 before reading
        files = request.FILES.getlist("files") if is_multipart(request) else []
        serializer = GenerateRequestSerializer(
            data=multipart_fields(request) if is_multipart(request) else request.data,
            context={"find_thread": self.find_thread},
        )
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        resource_id, thread = self.settle_owner(data.get("thread_id"), data.get("resource_id"))
        attachments_check(data["messages"], resource_id=resource_id)
        given = TurnInput.of(data["messages"])
        if files:
            given = given.with_messages(with_uploads(given.messages, files))
        thread_id, ref = data.get("thread_id"), None
        if agent.memory is not None:  # an agent without memory has no thread to resolve
            thread_id = thread_id or new_id()
            ref = ThreadRef.of(thread, thread_id=thread_id, resource_id=resource_id)
        return TurnRequest(given, ref, thread_id, resource_id, thread.pk if thread is not None else None)


def is_multipart(request: Request) -> bool:
    return (request.content_type or "").startswith("multipart/form-data")


def multipart_fields(request: Request) -> dict[str, Any]:
    """A multipart body's fields as the JSON body would carry them: `messages` is JSON or plain text."""
    fields: dict[str, Any] = {
        k: request.data.get(k) for k in ("thread_id", "resource_id") if k in request.data
    }
    raw = request.data.get("messages")
    if raw is not None:
        try:
            fields["messages"] = json.loads(raw)
        except (TypeError, ValueError):
            fields["messages"] = raw
    return fields


def with_uploads(messages: Sequence[Message], files: list[Any]) -> list[Message]:
    """Attaches uploaded files to the last user message; AttachmentUploader stores them."""
    values = list(messages)
    index = max((i for i, m in enumerate(values) if m.role == "user"), default=None)
    if index is None:
        raise serializers.ValidationError({"files": ["Files need a user message to go with."]})
    limit = memproc_settings.MAX_ATTACHMENT_BYTES
    for f in files:  # sizes are known before the files are read into memory
        if f.size > limit:
            raise AttachmentError(
                f"{f.name} is {f.size} bytes; the limit is {limit} bytes",
                code="too_large",
                metadata={"name": f.name, "size": f.size, "limit": limit},
            )
    parts = tuple(
        FilePart(data=f.read(), media_type=f.content_type or "application/octet-stream", name=f.name)
        for f in files
    )
    values[index] = values[index].replace(parts=values[index].parts + parts)
    return values
