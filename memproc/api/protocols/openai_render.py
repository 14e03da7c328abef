"""OpenAI Chat Completions bodies from memproc's results: a completion, the chunks of a streamed one
(`chat.completion.chunk` frames, then `data: [DONE]`), usage, and errors in OpenAI's
`{"message", "type", "param", "code"}` shape. `openai` holds the views and the request translation."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from rest_framework.utils.encoders import JSONEncoder

from memproc.api.errors import memproc_status
from memproc.api.sse import error_data
from memproc.events import GenerateResult, PendingCall, StreamEvent
from memproc.exceptions import MemprocError

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


def response_text(result: GenerateResult, *, after_call: str | None = None) -> str:
    """What the assistant said in the turn, as the client sees it: the text of its responses (after the
    turn's last user message), steps joined by a blank line, as the stream sends them. A turn resumed
    by the client's answer to `after_call` says only what follows that answer (the client has the
    rest). A suspended turn saved no message: its text so far is `result.text`, unless, resumed, the
    model said it before the answer (it is in the last prompt: the client has it)."""
    if result.pending is not None and not result.messages:
        said = {m.text for m in result.prompt if m.role == "assistant"} if after_call else set()
        return "" if result.text in said else result.text
    messages = result.messages

    def starts_after(message: Any) -> bool:
        if message.role == "user":
            return True
        return after_call is not None and any(r.tool_call_id == after_call for r in message.tool_results)

    start = max((i for i, m in enumerate(messages) if starts_after(m)), default=-1) + 1
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
        "pending": result.pending.as_dict() if result.pending is not None else None,
    }


def response_metadata(result: GenerateResult | None, thread_id: str | None) -> dict[str, Any]:
    """The response's `metadata`: the thread, and the call a suspended turn waits on (`pending`)."""
    metadata: dict[str, Any] = {"thread_id": (result.thread_id if result else None) or thread_id}
    if result is not None and result.pending is not None:
        metadata["pending"] = result.pending.as_dict()
    return metadata


def pending_tool_calls(pending: PendingCall) -> list[dict[str, Any]]:
    """A client-side call the turn waits on, as Chat Completions `tool_calls`: the client runs it and
    answers with a `tool` message."""
    arguments = json.dumps(pending.args, cls=JSONEncoder, ensure_ascii=False)
    return [
        {
            "id": pending.tool_call_id,
            "type": "function",
            "function": {"name": pending.tool_name, "arguments": arguments},
        }
    ]


# How a resent assistant message is known to be `waiting_text`'s notice (memproc.api.protocols.openai).
WAITING_NOTICE = re.compile(
    r"waits for approval \(pending call [0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12}\)"
)


def waiting_text(pending: PendingCall) -> str:
    """What the assistant message says of a call that waits for a person's decision (WAITING_NOTICE
    finds it in a resent conversation)."""
    arguments = json.dumps(pending.args, cls=JSONEncoder, ensure_ascii=False)
    return (
        f"The call {pending.tool_name}({arguments}) waits for approval (pending call {pending.id}); "
        "the answer follows once it is approved or rejected."
    )


def _joined(*texts: str) -> str:
    return "\n\n".join(t for t in texts if t)


def completion_body(
    result: GenerateResult,
    *,
    completion_id: str,
    created: int,
    model: str,
    thread_id: str | None,
    after_call: str | None = None,
) -> dict[str, Any]:
    """A `chat.completion`. A turn that waits on a client-side call answers its `tool_calls` with
    `finish_reason: "tool_calls"`; one that waits for a decision says so in `content` and stops;
    either names the waiting call in `metadata.pending`."""
    tripwire, pending = result.tripwire, result.pending
    text = response_text(result, after_call=after_call)
    message: dict[str, Any] = {
        "role": "assistant",
        "content": None if tripwire is not None else text,
        "refusal": tripwire.reason if tripwire is not None else None,
    }
    finish_reason = "content_filter" if tripwire is not None else "stop"
    if pending is not None and pending.kind == "client":
        message["content"] = text or None
        message["tool_calls"] = pending_tool_calls(pending)
        finish_reason = "tool_calls"
    elif pending is not None:
        message["content"] = _joined(text, waiting_text(pending))
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
                "finish_reason": finish_reason,
            }
        ],
        "usage": openai_usage(result.usage),
        "metadata": response_metadata(result, thread_id),
        "memproc": tripwire_extension(result),
    }


def replayed(result: GenerateResult, *, after_call: str | None = None) -> list[StreamEvent]:
    """A turn that ran to its end before anything was streamed (one resumed by the client's answer),
    as the stream events the encoder sends: its text, then its end."""
    if result.tripwire is not None:
        return [StreamEvent(type="tripwire", tripwire=result.tripwire, result=result)]
    text = response_text(result, after_call=after_call)
    events = [StreamEvent(type="text-delta", text=text)] if text else []
    end = "suspended" if result.pending is not None else "finish"
    return [*events, StreamEvent(type=end, result=result, usage=result.usage, pending=result.pending)]


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
        if event.type == "suspended" and event.result is not None and event.result.pending is not None:
            return [*self.suspended(event.result), *self.usage(event.result, event.usage)]
        if event.type == "tripwire" and event.tripwire is not None:
            extension = tripwire_extension(event.result) if event.result is not None else {}
            return [
                self.chunk({"refusal": event.tripwire.reason}, "content_filter", memproc=extension),
                *self.usage(event.result, event.usage),
            ]
        return []  # server-side tool calls, and retries (the text goes on with the new attempt)

    def suspended(self, result: GenerateResult) -> list[bytes]:
        """The end of a turn that waits: a client-side call's `tool_calls` delta and "tool_calls", or a
        content delta saying what waits for a decision and "stop"; `metadata.pending` on the last."""
        pending = result.pending
        assert pending is not None
        end = {"metadata": response_metadata(result, self.thread_id), "memproc": tripwire_extension(result)}
        if pending.kind == "client":
            calls = [{"index": 0, **call} for call in pending_tool_calls(pending)]
            return [self.chunk({"tool_calls": calls}), self.chunk({}, "tool_calls", **end)]
        notice = waiting_text(pending)
        return [
            self.chunk({"content": "\n\n" + notice if self.text_sent else notice}),
            self.chunk({}, "stop", **end),
        ]

    def error(self, exc: BaseException) -> list[bytes]:
        status = memproc_status(exc)[0] if isinstance(exc, MemprocError) else 500
        data = error_data(exc)
        return [sse({"error": openai_error(status, data)})]

    def end(self) -> list[bytes]:
        return [b"data: [DONE]\n\n"]
