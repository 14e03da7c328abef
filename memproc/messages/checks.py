"""Checks of untrusted message input (API requests, imports) that the value types do not make."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

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
