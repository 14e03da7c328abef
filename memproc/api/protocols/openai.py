"""The OpenAI Chat Completions protocol over memproc's agents, so the official `openai` clients work
with `base_url=".../api/memproc/v1"`.

* `model` is an agent id (`GET v1/models` lists them); `metadata["thread_id"]` names the thread (a new
  one when absent; its id comes back in the response's `metadata` and the `X-Memproc-Thread-Id`
  header); the resource is the caller's, as everywhere in memproc (`metadata["resource_id"]` for
  callers that may use several).
* Clients resend the whole conversation each turn; on a stored thread only what follows the last
  assistant message is new (`common.new_part`), so only the new messages are saved.
* The agent's own tools run on the server; their calls are not returned. Client-side `tools` are
  refused (the agent has its own).
* A blocked turn (tripwire) is `finish_reason: "content_filter"` with the reason in
  `message.refusal` (streamed: a last chunk with a `refusal` delta and that finish reason).
* Errors are OpenAI's `{"error": {"message", "type", "param", "code"}}` with the matching statuses, so
  the SDK raises its own exception classes (`NotFoundError` for an unknown model, ...).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

from django.db import transaction
from django.utils.decorators import method_decorator
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, views
from rest_framework.exceptions import NotFound
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.encoders import JSONEncoder

from memproc.agents import all_agents, get_agent
from memproc.api.errors import memproc_exception_handler, memproc_status
from memproc.api.protocols.auth import ProtocolAuthMixin
from memproc.api.protocols.common import (
    THREAD_HEADER,
    drop_blocked,
    new_part,
    turn_input_check,
    without_system,
)
from memproc.api.serializers import IdField
from memproc.api.sse import error_data, stream_response
from memproc.api.views.base import MemprocViewMixin
from memproc.events import GenerateResult, StreamEvent
from memproc.exceptions import MemprocError
from memproc.messages import new_id
from memproc.services.attachments import attachment_check_size
from memproc.turns.asgi import turn_events, turn_generate

IGNORED_SYSTEM_HEADER = "X-Memproc-Ignored-System-Messages"
ROLES = ("system", "developer", "user", "assistant", "tool")
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    409: "conflict_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    429: "rate_limit_error",
}


# --- errors ----------------------------------------------------------------------------------------


class ModelNotFound(NotFound):
    default_code = "model_not_found"


def openai_error(status: int, data: Any) -> dict[str, Any]:
    """memproc's error body (`{"detail", "code"}` or field errors) in OpenAI's shape."""
    message, code, param = "The request failed.", None, None
    if isinstance(data, Mapping) and "detail" in data:
        message, code = str(data["detail"]), data.get("code")
    elif isinstance(data, Mapping) and data:
        param, errors = next(iter(data.items()))
        message = _first_message(errors)
        if param == "non_field_errors":
            param = None
        else:
            message = f"{param}: {message}"
        code = "invalid_value"
    elif isinstance(data, list) and data:
        message, code = _first_message(data), "invalid_value"
    kind = ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    if status == 401 and code in (None, "not_authenticated", "authentication_failed"):
        code = "invalid_api_key"
    return {"message": message, "type": kind, "param": param, "code": code}


def _first_message(errors: Any) -> str:
    while isinstance(errors, (list, tuple)) and errors:
        errors = errors[0]
    if isinstance(errors, Mapping) and errors:
        key, value = next(iter(errors.items()))
        return f"{key}: {_first_message(value)}"
    return str(errors)


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
        if value:
            raise serializers.ValidationError(
                "memproc agents run their own tools on the server; client-side tools are not supported."
            )
        return value

    def validate_messages(self, value: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for message in value:
            if message.get("role") not in ROLES:
                raise serializers.ValidationError(
                    f"Unknown role {message.get('role')!r}; expected one of {', '.join(ROLES)}."
                )
        return value


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


def response_text(result: GenerateResult) -> str:
    """What the assistant said in the turn, as the client sees it: the text of its responses (after the
    turn's last user message), steps joined by a blank line, as the stream sends them."""
    messages = result.messages
    start = max((i for i, m in enumerate(messages) if m.role == "user"), default=-1) + 1
    return "\n\n".join(m.text for m in messages[start:] if m.role == "assistant" and m.text)


def openai_usage(usage: Mapping[str, Any] | None) -> dict[str, int]:
    usage = usage or {}

    def number(*keys: str) -> int:
        for key in keys:
            value = usage.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return int(value)
        return 0

    prompt = number("prompt_tokens", "input_tokens")
    completion = number("completion_tokens", "output_tokens")
    total = number("total_tokens") or prompt + completion
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": total}


def tripwire_extension(result: GenerateResult) -> dict[str, Any]:
    return {
        "thread_id": result.thread_id,
        "resource_id": result.resource_id,
        "tripwire": result.tripwire.as_dict() if result.tripwire is not None else None,
    }


def completion_body(
    result: GenerateResult, *, completion_id: str, created: int, model: str, thread_id: str | None
) -> dict[str, Any]:
    tripwire = result.tripwire
    message: dict[str, Any] = {
        "role": "assistant",
        "content": None if tripwire is not None else response_text(result),
        "refusal": tripwire.reason if tripwire is not None else None,
    }
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "system_fingerprint": None,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": "content_filter" if tripwire is not None else "stop",
            }
        ],
        "usage": openai_usage(result.usage),
        "metadata": {"thread_id": result.thread_id or thread_id},
        "memproc": tripwire_extension(result),
    }


def sse(data: Any) -> bytes:
    payload = json.dumps(data, cls=JSONEncoder, ensure_ascii=False, separators=(",", ":"))
    return f"data: {payload}\n\n".encode()


class ChunkEncoder:
    """A turn's stream events as `chat.completion.chunk` frames, then `data: [DONE]`."""

    def __init__(
        self, *, completion_id: str, created: int, model: str, thread_id: str | None, include_usage: bool
    ) -> None:
        self.completion_id = completion_id
        self.created = created
        self.model = model
        self.thread_id = thread_id
        self.include_usage = include_usage
        self.text_sent = False
        self.new_step = False

    def chunk(self, delta: dict[str, Any], finish_reason: str | None = None, **extra: Any) -> bytes:
        body: dict[str, Any] = {
            "id": self.completion_id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": None,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
            "metadata": {"thread_id": self.thread_id},
            **extra,
        }
        if self.include_usage:
            body["usage"] = None
        return sse(body)

    def usage(self, result: GenerateResult | None, usage: Mapping[str, Any] | None) -> list[bytes]:
        if not self.include_usage:
            return []
        body = {
            "id": self.completion_id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": None,
            "choices": [],
            "usage": openai_usage(result.usage if result is not None else usage),
            "metadata": {"thread_id": self.thread_id},
        }
        return [sse(body)]

    def begin(self) -> list[bytes]:
        return [self.chunk({"role": "assistant", "content": ""})]

    def event(self, event: StreamEvent) -> list[bytes]:
        if event.type == "text-delta" and event.text:
            text = "\n\n" + event.text if self.new_step and self.text_sent else event.text
            self.new_step, self.text_sent = False, True
            return [self.chunk({"content": text})]
        if event.type == "tool-result":
            self.new_step = True  # the next text is a new step's: a blank line apart, as in `content`
            return []
        if event.type == "finish":
            return [self.chunk({}, "stop"), *self.usage(event.result, event.usage)]
        if event.type == "tripwire" and event.tripwire is not None:
            extension = tripwire_extension(event.result) if event.result is not None else {}
            return [
                self.chunk({"refusal": event.tripwire.reason}, "content_filter", memproc=extension),
                *self.usage(event.result, event.usage),
            ]
        return []  # server-side tool calls, and retries (the text goes on with the new attempt)

    def error(self, exc: BaseException) -> list[bytes]:
        status = memproc_status(exc)[0] if isinstance(exc, MemprocError) else 500
        data = error_data(exc)
        return [sse({"error": openai_error(status, data)})]

    def end(self) -> list[bytes]:
        return [b"data: [DONE]\n\n"]


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
        metadata = data.get("metadata") or {}
        thread_id = self.thread_id(metadata.get("thread_id") or None)
        resource_id, thread = self.settle_owner(
            thread_id, self.resource_id(metadata.get("resource_id") or None)
        )
        if thread_id is None and agent.memory is not None:
            thread_id = new_id()
        conversation = drop_blocked(data["messages"], is_refusal)
        converted, ignored = without_system([memproc_message(m) for m in conversation])
        part = new_part(converted, thread_exists=thread is not None, agent=agent)
        turn_input_check(
            part,
            resource_id=resource_id,
            unanswerable="The conversation must end with a new user message for the agent to answer.",
        )
        headers = {IGNORED_SYSTEM_HEADER: str(ignored)} if ignored else {}
        if thread_id:
            headers[THREAD_HEADER] = thread_id
        completion_id, created = f"chatcmpl-{new_id()}", int(time.time())
        options = {"thread_id": thread_id, "resource_id": resource_id}
        if data.get("stream"):
            stream_options = data.get("stream_options") or {}
            encoder = ChunkEncoder(
                completion_id=completion_id,
                created=created,
                model=agent.id,
                thread_id=thread_id,
                include_usage=bool(stream_options.get("include_usage")),
            )
            return stream_response(turn_events(request, agent, part, **options), encoder, headers)
        result = turn_generate(request, agent, part, **options)
        body = completion_body(
            result, completion_id=completion_id, created=created, model=agent.id, thread_id=thread_id
        )
        return Response(body, headers=headers)

    def thread_id(self, value: str | None) -> str | None:
        return _metadata_id("thread_id", value)

    def resource_id(self, value: str | None) -> str | None:
        return _metadata_id("resource_id", value)


def _metadata_id(name: str, value: str | None) -> str | None:
    """A thread or resource id from `metadata`, under the same rule as everywhere in the API."""
    if value is None:
        return None
    try:
        return IdField().run_validation(value)
    except serializers.ValidationError as exc:
        raise serializers.ValidationError({"metadata": {name: exc.detail}}) from exc
