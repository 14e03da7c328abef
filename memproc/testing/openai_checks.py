"""The chat endpoint's checks of a conversation, as strict as the real API's.

`conversation_error` says why OpenAI would answer 400 (`invalid_request_error`, `param: "messages"`)
to a request's `messages`: missing or empty, a message without a valid role, a `tool` message without
a `tool_call_id` or one that does not answer a call of the assistant message right before its run of
tool messages, an assistant's `tool_calls` not all answered by the tool messages that follow it, a
duplicate call id within one assistant message or one run of answers.
"""

from __future__ import annotations

from typing import Any

_ROLES = ("system", "developer", "user", "assistant", "tool")

# The real API's wording (its "preceeding" included), so a test may match on what OpenAI would say.
_NOT_A_RESPONSE = (
    "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with "
    "'tool_calls'."
)
_UNANSWERED = (
    "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
    "'tool_call_id'. The following tool_call_ids did not have response messages: {ids}"
)


def conversation_error(body: dict[str, Any]) -> str | None:
    """Why the real API would refuse this request's `messages`, or None when it would accept them."""
    if "messages" not in body:
        return "Missing required parameter: 'messages'."
    messages = body["messages"]
    if not isinstance(messages, list):
        return f"Invalid type for 'messages': expected an array, but got {_json_type(messages)} instead."
    if not messages:
        return (
            "Invalid 'messages': empty array. Expected an array with minimum length 1, "
            "but got an empty array instead."
        )
    for index, message in enumerate(messages):
        if (error := _message_error(index, message)) is not None:
            return error
    return _pairing_error(messages)


def _message_error(index: int, message: Any) -> str | None:
    """The shape of one message on its own: an object, a known role, the ids that pair calls up."""
    where = f"messages[{index}]"
    if not isinstance(message, dict):
        return f"Invalid type for '{where}': expected an object, but got {_json_type(message)} instead."
    role = message.get("role")
    if role is None:
        return f"Missing required parameter: '{where}.role'."
    if role not in _ROLES:
        supported = ", ".join(f"'{r}'" for r in _ROLES[:-1])
        return f"Invalid value: {role!r}. Supported values are: {supported}, and '{_ROLES[-1]}'."
    if role == "tool" and not _is_id(message.get("tool_call_id")):
        return f"Missing required parameter: '{where}.tool_call_id'."
    if role == "assistant" and message.get("tool_calls") is not None:
        return _tool_calls_error(where, message["tool_calls"])
    return None


def _tool_calls_error(where: str, calls: Any) -> str | None:
    """An assistant's `tool_calls`: a non-empty list of calls, each with its own id."""
    if not isinstance(calls, list):
        return (
            f"Invalid type for '{where}.tool_calls': expected an array, but got {_json_type(calls)} instead."
        )
    if not calls:
        return (
            f"Invalid '{where}.tool_calls': empty array. Expected an array with minimum length 1, "
            "but got an empty array instead."
        )
    seen: set[str] = set()
    for index, call in enumerate(calls):
        call_id = call.get("id") if isinstance(call, dict) else None
        if not _is_id(call_id):
            return f"Missing required parameter: '{where}.tool_calls[{index}].id'."
        if call_id in seen:
            return f"Invalid parameter: Duplicate value for 'id' of {call_id!r} in '{where}.tool_calls'."
        seen.add(call_id)
    return None


def _pairing_error(messages: list[dict[str, Any]]) -> str | None:
    """Each run of tool messages answers the assistant message right before it, every call once."""
    expected: list[str] = []  # the call ids of the assistant message the current run answers
    answered: dict[str, int] = {}  # call id -> index of the tool message that answered it
    for index, message in enumerate(messages):
        if message["role"] == "tool":
            call_id = message["tool_call_id"]
            if call_id not in expected:
                return _NOT_A_RESPONSE
            if call_id in answered:
                return (
                    f"Invalid parameter: Duplicate value for 'tool_call_id' of {call_id!r} "
                    f"in messages[{answered[call_id]}] and messages[{index}]."
                )
            answered[call_id] = index
            continue
        if error := _unanswered_error(expected, answered):
            return error
        calls = message.get("tool_calls") if message["role"] == "assistant" else None
        expected = [call["id"] for call in calls or ()]
        answered = {}
    return _unanswered_error(expected, answered)


def _unanswered_error(expected: list[str], answered: dict[str, int]) -> str | None:
    missing = [call_id for call_id in expected if call_id not in answered]
    return _UNANSWERED.format(ids=", ".join(missing)) if missing else None


def _is_id(value: Any) -> bool:
    return isinstance(value, str) and bool(value)


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    names = {str: "a string", list: "an array", dict: "an object", type(None): "null"}
    return names.get(type(value), type(value).__name__)
