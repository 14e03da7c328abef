"""Immutable message value types, and their conversion to stored JSON and the OpenAI chat format.

Processors receive these objects. They are frozen all the way down (dicts become `FrozenDict`, lists
become tuples), so a processor that tries to edit a message in place fails loudly instead of
silently changing what another processor or the store sees.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import re
from collections.abc import ItemsView, Iterable, Iterator, KeysView, Mapping, Sequence, ValuesView
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar

from memproc.exceptions import ValidationError

ROLES = ("system", "user", "assistant", "tool")


class FrozenDict(Mapping[str, Any]):
    """A read-only dict: item assignment, deletion and update raise TypeError."""

    __slots__ = ("_data",)

    def __init__(self, data: Mapping[str, Any] | None = None) -> None:
        object.__setattr__(self, "_data", dict(data or {}))

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    # The dict's own lookups: Mapping's mixins go through __getitem__ and catch KeyError, and a
    # missing key (`metadata.get("quarantine")` on every stored message) is the common case.
    def get(self, key: str, default: Any = None) -> Any:
        return self._data.get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def keys(self) -> KeysView[str]:
        return self._data.keys()

    def items(self) -> ItemsView[str, Any]:
        return self._data.items()

    def values(self) -> ValuesView[Any]:
        return self._data.values()

    def __setattr__(self, name: str, value: Any) -> None:
        raise TypeError("FrozenDict is immutable")

    def __repr__(self) -> str:
        return f"FrozenDict({self._data!r})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            return dict(self._data) == dict(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(json.dumps(thaw(self), sort_keys=True, default=str))


def freeze(value: Any) -> Any:
    """Deep-freezes JSON-like data: dicts to FrozenDict, lists to tuples."""
    if isinstance(value, FrozenDict):
        return value
    if type(value) is dict and not value:  # most messages' metadata: one shared empty instance
        return _EMPTY
    if isinstance(value, Mapping):
        return FrozenDict({str(k): freeze(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(freeze(v) for v in value)
    return value


_EMPTY = FrozenDict()


def thaw(value: Any) -> Any:
    """The inverse of `freeze`: plain dicts and lists, ready for JSON."""
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [thaw(v) for v in value]
    return value


@dataclass(frozen=True, slots=True)
class TextPart:
    text: str
    type: ClassVar[str] = "text"


@dataclass(frozen=True, slots=True)
class FilePart:
    """An inline file (`data`: base64 text or bytes, or a data: URI) or a remote one (`url`)."""

    data: str | bytes | None = None
    url: str | None = None
    media_type: str = "application/octet-stream"
    name: str | None = None
    type: ClassVar[str] = "file"


@dataclass(frozen=True, slots=True)
class ToolCallPart:
    tool_call_id: str
    tool_name: str
    args: Mapping[str, Any] = field(default_factory=FrozenDict)
    type: ClassVar[str] = "tool-call"

    def __post_init__(self) -> None:
        object.__setattr__(self, "args", freeze(self.args))


@dataclass(frozen=True, slots=True)
class ToolResultPart:
    tool_call_id: str
    tool_name: str
    result: Any = None
    is_error: bool = False
    type: ClassVar[str] = "tool-result"

    def __post_init__(self) -> None:
        object.__setattr__(self, "result", freeze(self.result))


@dataclass(frozen=True, slots=True)
class AttachmentRef:
    """A file that was offloaded to storage; the message keeps only this reference."""

    attachment_id: str
    name: str = ""
    media_type: str = "application/octet-stream"
    size: int = 0
    type: ClassVar[str] = "attachment"


Part = TextPart | FilePart | ToolCallPart | ToolResultPart | AttachmentRef
PART_TYPES: dict[str, type] = {
    cls.type: cls for cls in (TextPart, FilePart, ToolCallPart, ToolResultPart, AttachmentRef)
}
_PART_CLASSES = tuple(PART_TYPES.values())
# The field names of each part type: reading a stored message builds several parts per message.
PART_FIELDS: dict[type, frozenset[str]] = {
    cls: frozenset(f.name for f in dataclasses.fields(cls)) for cls in _PART_CLASSES
}


def new_id() -> str:
    """A random (version 4) UUID as 32 hex digits: `uuid.uuid4().hex`, without building a UUID object
    (two or more ids per turn; the object's checks cost three times the random bytes)."""
    value = int.from_bytes(os.urandom(16), "big")
    return "%032x" % ((value & _UUID4_KEEP) | _UUID4_BITS)


# The version (4) and variant (RFC 4122) bits of a random UUID, as uuid.UUID(version=4) sets them.
_UUID4_BITS = (0x4000 << 64) | (0x8000 << 48)
_UUID4_KEEP = ~((0xF000 << 64) | (0xC000 << 48)) & ((1 << 128) - 1)


@dataclass(frozen=True, slots=True)
class Message:
    id: str
    role: str
    parts: tuple[Part, ...]
    created_at: datetime | None = None
    thread_id: str | None = None
    resource_id: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=FrozenDict)
    # The position in its thread, for messages read from storage: it orders messages exactly when
    # their timestamps tie (one turn's input shares one). Not part of equality, never stored as content.
    sequence: int | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValidationError(f"Unknown message role {self.role!r}; expected one of {', '.join(ROLES)}")
        if not isinstance(self.parts, tuple):
            object.__setattr__(self, "parts", tuple(self.parts))
        for part in self.parts:
            if not isinstance(part, _PART_CLASSES):
                raise ValidationError(f"Not a message part: {part!r}")
        object.__setattr__(self, "metadata", freeze(self.metadata))

    @classmethod
    def create(cls, role: str, content: str | Sequence[Part] = "", **fields: Any) -> Message:
        """A new message with a fresh id; `content` is text or a sequence of parts."""
        parts: tuple[Part, ...] = (TextPart(content),) if isinstance(content, str) else tuple(content)
        return cls(id=fields.pop("id", None) or new_id(), role=role, parts=parts, **fields)

    def replace(self, **changes: Any) -> Message:
        if type(self) is Message and changes.keys() <= _UNCHECKED_FIELDS:
            # Nothing __post_init__ checks or freezes changes: copy the slots (a turn replaces
            # every message's ids and times; dataclasses.replace re-validated every part each time).
            copy = object.__new__(Message)
            for name in _MESSAGE_FIELDS:
                object.__setattr__(copy, name, changes[name] if name in changes else getattr(self, name))
            return copy
        return dataclasses.replace(self, **changes)

    @property
    def text(self) -> str:
        parts = self.parts
        if len(parts) == 1 and type(parts[0]) is TextPart:  # most messages: read many times a turn
            return parts[0].text
        return "".join(p.text for p in parts if isinstance(p, TextPart))

    @property
    def tool_calls(self) -> tuple[ToolCallPart, ...]:
        return tuple(p for p in self.parts if isinstance(p, ToolCallPart))

    @property
    def tool_results(self) -> tuple[ToolResultPart, ...]:
        return tuple(p for p in self.parts if isinstance(p, ToolResultPart))

    @property
    def files(self) -> tuple[FilePart | AttachmentRef, ...]:
        return tuple(p for p in self.parts if isinstance(p, (FilePart, AttachmentRef)))

    def to_content(self) -> dict[str, Any]:
        """The JSON stored in `memproc.models.Message.content`."""
        content: dict[str, Any] = {"parts": [part_to_json(p) for p in self.parts]}
        if self.metadata:
            content["metadata"] = thaw(self.metadata)
        return content


_MESSAGE_FIELDS = tuple(f.name for f in dataclasses.fields(Message))
# The fields Message.__post_init__ neither checks nor converts.
_UNCHECKED_FIELDS = frozenset(_MESSAGE_FIELDS) - {"role", "parts", "metadata"}


# --- stored JSON ----------------------------------------------------------------------------------


def part_to_json(part: Part) -> dict[str, Any]:
    data: dict[str, Any] = {"type": part.type}
    for f in dataclasses.fields(part):
        value = getattr(part, f.name)
        if isinstance(value, bytes):
            value = base64.b64encode(value).decode("ascii")
        data[f.name] = thaw(value)
    return data


def part_from_json(data: Mapping[str, Any]) -> Part:
    if not isinstance(data, Mapping):
        raise ValidationError(f"A message part must be an object, not {type(data).__name__}")
    kind = data.get("type")
    cls = PART_TYPES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise ValidationError(f"Unknown part type {kind!r}; expected one of {', '.join(PART_TYPES)}")
    names = PART_FIELDS[cls]
    try:
        return cls(**{k: v for k, v in data.items() if k in names})
    except TypeError as exc:
        raise ValidationError(f"Bad {kind!r} part: {exc}") from exc


def message_from_content(
    *,
    id: str,
    role: str,
    content: Mapping[str, Any],
    created_at: datetime | None = None,
    thread_id: str | None = None,
    resource_id: str | None = None,
    sequence: int | None = None,
) -> Message:
    parts = tuple(part_from_json(p) for p in content.get("parts", ()))
    return Message(
        id=id,
        role=role,
        parts=parts,
        created_at=created_at,
        thread_id=thread_id,
        resource_id=resource_id,
        metadata=content.get("metadata") or {},
        sequence=sequence,
    )


# --- checks of untrusted input (API requests, imports) ------------------------------------------

UNSTORABLE = re.compile("[\x00\ud800-\udfff]")  # NUL and lone surrogates: databases refuse them


def has_unstorable_text(value: Any) -> bool:
    """Whether any string (or key) in JSON-like data holds characters no database stores."""
    if isinstance(value, str):
        return UNSTORABLE.search(value) is not None
    if isinstance(value, Mapping):
        return any(has_unstorable_text(str(k)) or has_unstorable_text(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(has_unstorable_text(item) for item in value)
    return False


PART_FIELD_TYPES: dict[str, dict[str, tuple[type, ...]]] = {
    "text": {"text": (str,)},
    "file": {
        "data": (str, type(None)),
        "url": (str, type(None)),
        "media_type": (str,),
        "name": (str, type(None)),
    },
    "tool-call": {"tool_call_id": (str,), "tool_name": (str,), "args": (Mapping,)},
    "tool-result": {"tool_call_id": (str,), "tool_name": (str,), "is_error": (bool,)},
    "attachment": {"attachment_id": (str,), "name": (str,), "media_type": (str,), "size": (int,)},
}


def part_errors(part: Any) -> list[str]:
    """Field types the parts' dataclasses do not check themselves (JSON gives any type anywhere)."""
    errors = [
        f"A {part.type} part's {name} has the wrong type."
        for name, types in PART_FIELD_TYPES.get(part.type, {}).items()
        if not isinstance(getattr(part, name), types)
        or (types == (int,) and isinstance(getattr(part, name), bool))
    ]
    if part.type == "file" and not (part.data or part.url):
        errors.append("A file part needs data or a url.")
    return errors


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
