"""Messages from and to the formats callers speak: what `Agent.generate` accepts (strings, dicts of
stored part JSON or OpenAI content parts, `Message` values) and the OpenAI chat format."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from memproc.exceptions import ValidationError
from memproc.messages.types import (
    AttachmentRef,
    FilePart,
    Message,
    Part,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    part_from_json,
    thaw,
)

# --- caller input ---------------------------------------------------------------------------------

MessageInput = str | Mapping[str, Any] | Message | Sequence[str | Mapping[str, Any] | Message]


def to_messages(value: MessageInput) -> list[Message]:
    """Normalises what callers pass to `Agent.generate`: a string, a dict, a Message or a list of those."""
    if isinstance(value, (str, Mapping, Message)):
        items: Iterable[Any] = [value]
    elif isinstance(value, Sequence):
        items = value
    else:
        raise ValidationError(f"messages must be a string, a dict or a list, not {type(value).__name__}")
    try:
        result = [_to_message(item) for item in items]
    except (TypeError, AttributeError, KeyError) as exc:  # odd shapes from JSON clients
        raise ValidationError(f"Malformed message: {exc}") from exc
    if not result:
        raise ValidationError("messages must not be empty")
    return result


def _to_message(item: Any) -> Message:
    if isinstance(item, Message):
        return item
    if isinstance(item, str):
        return Message.create("user", item)
    if isinstance(item, Mapping):
        return _message_from_dict(item)
    raise ValidationError(f"A message must be a string, a dict or a Message, not {type(item).__name__}")


def _message_from_dict(data: Mapping[str, Any]) -> Message:
    role = data.get("role", "user")
    if "parts" in data:
        parts = tuple(part_from_json(p) for p in data["parts"] or ())
        return Message.create(role, parts, id=data.get("id"))
    if role == "tool" or "tool_calls" in data:
        return from_openai(data)
    content = data.get("content", "")
    if isinstance(content, str):
        return Message.create(role, content, id=data.get("id"))
    if isinstance(content, Sequence):
        return Message.create(role, tuple(_part_from_content_item(c) for c in content), id=data.get("id"))
    raise ValidationError("content must be a string or a list of parts")


def _part_from_content_item(item: Any) -> Part:
    """Accepts memproc's part JSON and OpenAI's content parts (text, image_url, file)."""
    if isinstance(item, str):
        return TextPart(item)
    if not isinstance(item, Mapping):
        raise ValidationError("a content part must be an object")
    kind = item.get("type")
    if kind == "image_url":
        url = item.get("image_url", {})
        url = url.get("url") if isinstance(url, Mapping) else url
        return _file_from_url(str(url or ""), media_type="image/*", name=None)
    if kind == "file" and isinstance(item.get("file"), Mapping):
        f = item["file"]
        return _file_from_url(str(f.get("file_data") or ""), media_type=None, name=f.get("filename"))
    return part_from_json(item)


def _file_from_url(url: str, *, media_type: str | None, name: str | None) -> FilePart:
    if url.startswith("data:"):
        header = url[5:].split(",", 1)[0]
        mt = header.split(";", 1)[0] or media_type or "application/octet-stream"
        return FilePart(data=url, media_type=mt, name=name)
    if not url:
        raise ValidationError("a file part needs a url or data")
    return FilePart(url=url, media_type=media_type or "application/octet-stream", name=name)


# --- OpenAI chat format ---------------------------------------------------------------------------


def to_openai(messages: Iterable[Message]) -> list[dict[str, Any]]:
    """Messages in the chat-completions format; a tool message with n results becomes n messages."""
    out: list[dict[str, Any]] = []
    for message in messages:
        out.extend(_message_to_openai(message))
    return out


def _message_to_openai(message: Message) -> list[dict[str, Any]]:
    if message.role == "tool":
        return [
            {
                "role": "tool",
                "tool_call_id": r.tool_call_id,
                "content": r.result if isinstance(r.result, str) else json.dumps(thaw(r.result), default=str),
            }
            for r in message.tool_results
        ]
    if message.role == "assistant":
        data: dict[str, Any] = {"role": "assistant", "content": message.text or None}
        calls = message.tool_calls
        if calls:
            data["tool_calls"] = [
                {
                    "id": c.tool_call_id,
                    "type": "function",
                    "function": {"name": c.tool_name, "arguments": json.dumps(thaw(c.args))},
                }
                for c in calls
            ]
        return [data]
    files = message.files
    if message.role == "user" and files:
        content: list[dict[str, Any]] = []
        for part in message.parts:
            if isinstance(part, TextPart):
                content.append({"type": "text", "text": part.text})
            elif isinstance(part, FilePart):
                content.append(_file_to_openai(part))
            elif isinstance(part, AttachmentRef):
                content.append({"type": "text", "text": f"[attachment {part.name} ({part.media_type})]"})
        return [{"role": "user", "content": content}]
    return [{"role": message.role, "content": message.text}]


def _file_to_openai(part: FilePart) -> dict[str, Any]:
    url = part.url or _data_uri(part)
    if part.media_type.startswith("image/"):
        return {"type": "image_url", "image_url": {"url": url}}
    return {"type": "file", "file": {"filename": part.name or "file", "file_data": url}}


def _data_uri(part: FilePart) -> str:
    data = part.data or b""
    if isinstance(data, str):
        if data.startswith("data:"):
            return data
        return f"data:{part.media_type};base64,{data}"
    return f"data:{part.media_type};base64,{base64.b64encode(data).decode('ascii')}"


def from_openai(data: Mapping[str, Any]) -> Message:
    role = data.get("role")
    if role == "tool":
        part = ToolResultPart(
            tool_call_id=str(data.get("tool_call_id", "")),
            tool_name=str(data.get("name", "")),
            result=data.get("content"),
        )
        return Message.create("tool", (part,), id=data.get("id"))
    parts: list[Part] = []
    content = data.get("content")
    if isinstance(content, str) and content:
        parts.append(TextPart(content))
    elif isinstance(content, Sequence) and not isinstance(content, str):
        parts.extend(_part_from_content_item(c) for c in content)
    for call in data.get("tool_calls") or ():
        fn = call.get("function", {})
        parts.append(ToolCallPart(call.get("id", ""), fn.get("name", ""), _parse_args(fn.get("arguments"))))
    return Message.create(str(role or "user"), tuple(parts), id=data.get("id"))


def _parse_args(arguments: Any) -> dict[str, Any]:
    if isinstance(arguments, Mapping):
        return dict(arguments)
    if not arguments:
        return {}
    try:
        parsed = json.loads(arguments)
    except (TypeError, ValueError):
        return {"_raw": arguments}
    return parsed if isinstance(parsed, dict) else {"value": parsed}
