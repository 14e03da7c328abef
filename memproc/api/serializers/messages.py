"""Messages: the `messages` input of a turn, its checks, and stored messages as the API renders them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from memproc import models
from memproc.api.serializers.fields import validate_json_text
from memproc.conf import settings
from memproc.exceptions import MemprocError
from memproc.messages import Message, TextPart, part_errors, part_to_json, to_messages
from memproc.models import public_thread_id
from memproc.processors.attachment_checks import inline_files_check
from memproc.processors.conversation import unanswered_calls
from memproc.selectors.messages import thread_messages

ROLE_INPUT = ["user", "assistant", "tool"]
PART_TYPES = ["text", "file", "tool-call", "tool-result", "attachment"]

# Text that makes a message: an empty one, or one of whitespace only, is refused ("This message is
# empty"). The pattern says "holds a character other than whitespace".
MESSAGE_TEXT_SCHEMA = {"type": "string", "minLength": 1, "pattern": "\\S"}

PART_SCHEMA = {
    "type": "object",
    "description": "A message part: text, file, tool-call, tool-result or attachment.",
    "properties": {"type": {"type": "string", "enum": PART_TYPES}},
    "required": ["type"],
    "additionalProperties": True,
}
MESSAGE_INPUT_OBJECT = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "description": "Optional client id; a stored id is not saved twice."},
        "role": {"type": "string", "enum": ROLE_INPUT, "default": "user"},
        "content": {
            "oneOf": [MESSAGE_TEXT_SCHEMA, {"type": "array", "minItems": 1, "items": PART_SCHEMA}],
            "description": "Text, or a list of parts (memproc parts or OpenAI content parts).",
        },
    },
    "required": ["content"],
}
MESSAGES_INPUT_SCHEMA = {
    "description": "One user message as a string, one `{role, content}` object, or a list of either.",
    "oneOf": [
        MESSAGE_TEXT_SCHEMA,
        MESSAGE_INPUT_OBJECT,
        {"type": "array", "minItems": 1, "items": {"oneOf": [MESSAGE_TEXT_SCHEMA, MESSAGE_INPUT_OBJECT]}},
    ],
}


@extend_schema_field(MESSAGES_INPUT_SCHEMA)
class MessagesField(serializers.JSONField):
    """`messages` as `Agent.generate` takes them; checked by normalising them, handed on unchanged."""

    def to_internal_value(self, data: Any) -> Any:
        data = super().to_internal_value(data)
        validate_json_text(data)
        items = data if isinstance(data, list) else [data]
        limit = settings.MAX_REQUEST_MESSAGES
        if len(items) > limit:
            raise serializers.ValidationError(f"At most {limit} messages per request.")
        for item in items:
            if isinstance(item, dict) and "id" in item and not _good_message_id(item["id"]):
                raise serializers.ValidationError("A message id must be a string of 1 to 255 characters.")
        try:
            messages = to_messages(data)
        except (MemprocError, TypeError, AttributeError, KeyError, ValueError) as exc:
            raise serializers.ValidationError(str(exc) or "Invalid messages.") from exc
        if any(m.role == "system" for m in messages) and not settings.API_ALLOW_SYSTEM_MESSAGES:
            raise serializers.ValidationError(
                "System messages cannot be sent; they come from the agent "
                '(a site can allow them with MEMPROC["API_ALLOW_SYSTEM_MESSAGES"]).'
            )
        errors = [error for m in messages for part in m.parts for error in part_errors(part)]
        if errors:
            raise serializers.ValidationError(errors[:5])
        by_message = message_errors(messages)
        if by_message:
            raise serializers.ValidationError(by_message)
        inline_files_check(messages)
        return data


def message_errors(
    messages: Sequence[Message], *, thread_calls: set[str] | None = None
) -> dict[int, dict[str, list[str]]]:
    """Field errors of single messages, by their index: `{index: {"content" | "id" | "tool_call_id":
    [...]}}`. Ids must be unique within the request; a tool call must be answered by the tool messages
    right after its assistant message.

    A message needs content: text that is not blank, a file, a tool call or a tool result; tool calls
    are an assistant message's, tool results a tool message's. A tool result must answer a call of
    the assistant message its run of tool messages follows; results before the first assistant
    message of the list can only answer the thread's last message, whose calls are `thread_calls`
    (None: not known here, so those are left to the caller to check)."""
    errors: dict[int, dict[str, list[str]]] = {}
    answerable: set[str] | None = None  # no assistant message yet: the thread's calls
    unanswered = unanswered_calls(messages)
    seen: set[str] = set()
    for index, message in enumerate(messages):
        found: dict[str, list[str]] = {}
        if message.id in seen:
            found["id"] = [f"Message id {message.id!r} is used twice in this request; ids must be unique."]
        seen.add(message.id)
        if all(isinstance(p, TextPart) and not p.text.strip() for p in message.parts):
            found["content"] = ["This message is empty: send text, a file, a tool call or a tool result."]
        elif message.role == "tool" and not message.tool_results:
            found["content"] = ["A tool message holds tool results."]
        elif message.role != "tool" and message.tool_results:
            found["content"] = ["Only tool messages hold tool results."]
        elif message.role != "assistant" and message.tool_calls:
            found["content"] = ["Only assistant messages hold tool calls."]
        calls = answerable if answerable is not None else thread_calls
        if calls is not None:
            orphans = [r.tool_call_id for r in message.tool_results if r.tool_call_id not in calls]
            if orphans:
                found["tool_call_id"] = [
                    f"No tool call {call_id!r} to answer: a tool result must follow the assistant "
                    "message that made the call (in this request, or the thread's last message)."
                    for call_id in orphans[:5]
                ]
        if index in unanswered:
            found.setdefault("tool_call_id", []).extend(
                f"Tool call {call_id!r} has no result: the tool messages right after this message must "
                "answer each of its calls."
                for call_id in unanswered[index][:5]
            )
        if found:
            errors[index] = found
        if message.role == "assistant":
            answerable = {c.tool_call_id for c in message.tool_calls}
        elif message.role == "user":
            answerable = set()
    return errors


def thread_open_calls(thread_key: str | None) -> set[str]:
    """The tool calls of the thread's last message when it is an assistant message: the calls a
    turn's leading tool results may answer. One query; none without a thread."""
    if not thread_key:
        return set()
    last = thread_messages(thread_key=thread_key).reverse().values_list("role", "content").first()
    if last is None or last[0] != "assistant":
        return set()
    parts = (last[1] or {}).get("parts") or ()
    return {
        str(p.get("tool_call_id"))
        for p in parts
        if isinstance(p, Mapping) and p.get("type") == "tool-call" and p.get("tool_call_id")
    }


def _good_message_id(value: Any) -> bool:
    return isinstance(value, str) and 0 < len(value) <= 255


class MessageSerializer(serializers.Serializer):
    """A stored message row or a `memproc.messages.Message`, rendered alike."""

    id = serializers.SerializerMethodField()
    role = serializers.ChoiceField(choices=models.Message.Role.choices)
    parts = serializers.SerializerMethodField()
    created_at = serializers.DateTimeField(allow_null=True)
    thread_id = serializers.SerializerMethodField()

    @extend_schema_field({"type": "string"})
    def get_id(self, message: Any) -> str:
        """A row's key names its resource too; the API speaks the message id."""
        return message.id if isinstance(message, Message) else message.public_id

    @extend_schema_field({"type": "string", "nullable": True})
    def get_thread_id(self, message: Any) -> str | None:
        """A row holds its thread's key; a value and the API speak the thread id."""
        return public_thread_id(message.thread_id) if message.thread_id else None

    @extend_schema_field({"type": "array", "items": PART_SCHEMA})
    def get_parts(self, message: Any) -> list[dict[str, Any]]:
        if isinstance(message, Message):
            return [part_to_json(p) for p in message.parts]
        return list((message.content or {}).get("parts", []))


class MessagePageSerializer(serializers.Serializer):
    """One page of a thread's messages (cursor pagination)."""

    next = serializers.URLField(allow_null=True)
    previous = serializers.URLField(allow_null=True)
    results = MessageSerializer(many=True)
