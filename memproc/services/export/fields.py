"""Readers of one field of an export document: each returns the value or raises a ValidationError
that names its place (`threads[2].messages[5].role: ...`)."""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping
from typing import Any

from django.utils.dateparse import parse_datetime

from memproc.exceptions import ValidationError
from memproc.messages import UNSTORABLE, has_unstorable_text
from memproc.models import THREAD_KEY_SEPARATOR

INT_MAX = 2**31 - 1  # PositiveIntegerField's range on every database
# Sequences (BIGINT columns) and file sizes: room for the thread to grow, and exact in every JSON reader.
SEQUENCE_MAX = 2**53 - 1


def object_at(data: Any, key: str, where: str) -> Mapping[str, Any]:
    value = data.get(key) if isinstance(data, Mapping) else None
    if not isinstance(value, Mapping):
        raise ValidationError(f"{where}: expected an object")
    return value


def items_at(data: Mapping[str, Any], key: str, where: str = "") -> list[Mapping[str, Any]]:
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, Mapping) for v in value):
        raise ValidationError(f"{f'{where}.' if where else ''}{key}: expected a list of objects")
    return value


def id_at(data: Mapping[str, Any], key: str, where: str) -> str:
    value = data.get(key)
    if not isinstance(value, str) or not value or len(value) > 255 or UNSTORABLE.search(value):
        raise ValidationError(f"{where}.{key}: expected an id (a string of 1 to 255 characters)")
    return value


def resource_id_at(data: Mapping[str, Any], key: str, where: str) -> str:
    """A resource id: it starts the keys of the resource's threads, so it cannot hold their separator."""
    value = id_at(data, key, where)
    if THREAD_KEY_SEPARATOR in value:
        raise ValidationError(f"{where}.{key}: a resource id cannot hold control characters")
    return value


def thread_id_at(data: Mapping[str, Any], key: str, where: str) -> str:
    """A thread id as callers know it. A stored key (resource id, separator, thread id) is refused
    rather than guessed at: no export writes one."""
    value = id_at(data, key, where)
    if THREAD_KEY_SEPARATOR in value:
        raise ValidationError(f"{where}.{key}: expected a thread id, not a stored thread key")
    return value


def thread_ref_at(data: Mapping[str, Any], key: str, where: str) -> str:
    """An optional thread id ("": none), beside a resource id or of the document's resource."""
    return thread_id_at(data, key, where) if text_at(data, key, where) else ""


def uuid_at(data: Mapping[str, Any], key: str, where: str) -> uuid.UUID:
    try:
        return uuid.UUID(str(data.get(key)))
    except ValueError as exc:
        raise ValidationError(f"{where}.{key}: expected a UUID") from exc


def text_at(data: Mapping[str, Any], key: str, where: str) -> str:
    value = data.get(key, "")
    if not isinstance(value, str) or UNSTORABLE.search(value):
        raise ValidationError(f"{where}.{key}: expected a string (without NUL or lone surrogates)")
    return value


def integer_at(
    data: Mapping[str, Any],
    key: str,
    where: str,
    *,
    low: int = 0,
    high: int = INT_MAX,
    optional: bool = False,
) -> Any:
    """An integer from `low` to `high` (an integral float is taken as one). The default range fits
    the integer columns of every database; sequences and sizes go to SEQUENCE_MAX."""
    value = data.get(key, None if optional else 0)
    if value is None and optional:
        return None
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValidationError(f"{where}.{key}: expected a whole number from {low} to {high}")
    return value


def number_at(data: Mapping[str, Any], key: str, where: str) -> float:
    value = data.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
        raise ValidationError(f"{where}.{key}: expected a finite number >= 0")
    return float(value)


def dict_at(data: Mapping[str, Any], key: str, where: str) -> dict[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise ValidationError(f"{where}.{key}: expected an object")
    return storable(value, f"{where}.{key}")


def storable(value: Any, where: str) -> Any:
    if has_unstorable_text(value):
        raise ValidationError(f"{where}: holds NUL characters or lone surrogates, which no database stores")
    return value


def time_at(data: Mapping[str, Any], key: str, where: str, *, optional: bool = False) -> Any:
    value = data.get(key)
    if value is None and optional:
        return None
    try:
        parsed = parse_datetime(value) if isinstance(value, str) else None
    except ValueError:
        parsed = None
    if parsed is None or parsed.tzinfo is None:
        raise ValidationError(f"{where}.{key}: expected an ISO 8601 time with an offset")
    return parsed


def names_at(data: Mapping[str, Any], key: str, where: str) -> list[str]:
    """An optional list of short strings (absent: empty)."""
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and 0 < len(v) <= 255 for v in value):
        raise ValidationError(f"{where}.{key}: expected a list of names (strings of 1 to 255 characters)")
    return storable(list(dict.fromkeys(value)), f"{where}.{key}")


def flag_at(data: Mapping[str, Any], key: str, where: str) -> bool:
    """An optional boolean (absent: false)."""
    value = data.get(key, False)
    if not isinstance(value, bool):
        raise ValidationError(f"{where}.{key}: expected true or false")
    return value


def choice_at(data: Mapping[str, Any], key: str, where: str, choices: Any) -> str:
    value = data.get(key)
    allowed = [c[0] for c in choices]
    if value not in allowed:
        raise ValidationError(f"{where}.{key}: expected one of {', '.join(allowed)}")
    return value
