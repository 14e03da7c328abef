"""The message value types (`Message` and its parts, `FrozenDict`), and their stored JSON.

Processors receive these objects. They are frozen all the way down (dicts become `FrozenDict`, lists
become tuples), so a processor that tries to edit a message in place fails loudly instead of
silently changing what another processor or the store sees.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
from collections.abc import ItemsView, Iterator, KeysView, Mapping, Sequence, ValuesView
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
