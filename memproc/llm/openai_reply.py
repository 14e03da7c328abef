"""Reading an OpenAI-compatible reply: a chat completion, its tool calls and its usage.

The SDK builds its objects without validation, so any field may hold anything. A reply memproc
cannot read (`message: null`, fields of the wrong type, no choices, tool-call arguments that are not
a JSON object) is a `ModelResponseError`, never a crash.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from typing import Any

from memproc.conf import settings
from memproc.exceptions import ModelResponseError
from memproc.llm.openai_errors import clip
from memproc.llm.openai_options import sdk
from memproc.llm.types import ModelResponse, ToolCall


def completion_response(completion: Any, *, model_id: str) -> ModelResponse:
    """The `ModelResponse` of a whole (not streamed) chat completion: its first choice."""
    choices = reply_list(completion, "choices")
    if not choices:
        raise ModelResponseError(f"{model_id} answered with no choices")
    choice = choices[0]
    message = reply_object(field(choice, "message"), "choices[0].message")
    content = optional_text(field(message, "content"), "message.content")
    refusal = optional_text(field(message, "refusal"), "message.refusal")
    raw_calls = field(message, "tool_calls")
    if raw_calls is not None and not isinstance(raw_calls, list):
        raise ModelResponseError(f"{model_id} sent message.tool_calls that is not a list")
    tool_calls = []
    for index, call in enumerate(raw_calls or ()):
        call = reply_object(call, f"tool_calls[{index}]")
        function = field(call, "function")
        if function is None:
            continue  # not a function call (a custom tool type memproc does not offer)
        function = reply_object(function, f"tool_calls[{index}].function")
        tool_calls.append(
            tool_call(
                model_id,
                optional_text(field(call, "id"), f"tool_calls[{index}].id"),
                optional_text(field(function, "name"), f"tool_calls[{index}].function.name"),
                _arguments(field(function, "arguments"), f"tool_calls[{index}].function.arguments"),
                index,
            )
        )
    finish_reason = optional_text(field(choice, "finish_reason"), "choices[0].finish_reason")
    return ModelResponse(
        text=content or refusal or "",
        tool_calls=tool_calls,
        usage=usage(field(completion, "usage")),
        finish_reason=finish_reason or ("tool_calls" if tool_calls else "stop"),
    )


def tool_call(
    model_id: str,
    call_id: str | None,
    name: str | None,
    arguments: str | Mapping[str, Any] | None,
    index: int,
) -> ToolCall:
    if not name:
        raise ModelResponseError(f"{model_id} sent tool call #{index} without a function name")
    if isinstance(arguments, Mapping):  # already an object: some local servers send it unencoded
        return ToolCall(id=call_id or f"call_{uuid.uuid4().hex[:24]}", name=name, args=dict(arguments))
    try:
        args = json.loads(arguments) if arguments and arguments.strip() else {}
    except ValueError:
        raise ModelResponseError(
            f"{model_id} sent tool call {name!r} with arguments that are not valid JSON: {_shown(arguments)}"
        ) from None
    if not isinstance(args, dict):
        raise ModelResponseError(
            f"{model_id} sent tool call {name!r} with arguments that are not a JSON object: "
            f"{_shown(arguments)}"
        )
    # Some local servers omit the id; the agent loop needs one to pair the result with the call.
    return ToolCall(id=call_id or f"call_{uuid.uuid4().hex[:24]}", name=name, args=args)


def usage(value: Any) -> dict[str, Any]:
    """Token counts; a count that is not a non-negative integer counts as unknown (0), since usage
    is bookkeeping, not the answer."""
    if value is None:
        return {}
    prompt = _count(field(value, "prompt_tokens"))
    completion = _count(field(value, "completion_tokens"))
    total = _count(field(value, "total_tokens")) or prompt + completion
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": total}


def field(obj: Any, name: str) -> Any:
    """An attribute of an SDK object (None when absent); never of a str, list, number or None."""
    if isinstance(obj, sdk().BaseModel):
        return getattr(obj, name, None)
    return None


def reply_object(value: Any, what: str) -> Any:
    """`value` if the SDK could build an object of it (it was a JSON object), else a response error."""
    if not isinstance(value, sdk().BaseModel):
        raise ModelResponseError(f"the provider sent {what} that is {_json_kind(value)}, not an object")
    return value


def reply_list(obj: Any, name: str) -> list[Any]:
    if not isinstance(obj, sdk().BaseModel):
        raise ModelResponseError(f"the provider's reply is {_json_kind(obj)}, not a chat completion")
    value = getattr(obj, name, None)
    if value is None:
        return []
    if not isinstance(value, list):
        raise ModelResponseError(f"the provider sent {name} that is {_json_kind(value)}, not a list")
    return value


def optional_text(value: Any, what: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise ModelResponseError(f"the provider sent {what} that is {_json_kind(value)}, not a string")


def _arguments(value: Any, what: str) -> str | Mapping[str, Any] | None:
    if value is None or isinstance(value, (str, Mapping)):
        return value
    raise ModelResponseError(f"the provider sent {what} that is {_json_kind(value)}, not a string")


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (list, tuple)):
        return "a list"
    return f"a {type(value).__name__}"


def _shown(arguments: Any) -> str:
    """Tool-call arguments for an error's text: the model's output, so only with TRACE_CONTENT."""
    return clip(repr(arguments)) if settings.TRACE_CONTENT else "(shown with TRACE_CONTENT)"
