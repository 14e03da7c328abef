"""Filters on JSON metadata, shared by thread lists and message reads."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from django.db.models import Q, QuerySet
from django.db.models.fields.json import KeyTransform

from memproc.exceptions import ValidationError

METADATA_SCALARS = (str, int, float, bool, type(None))


def metadata_filter(
    queryset: QuerySet[Any],
    metadata: Mapping[str, Any] | None,
    *,
    field: str = "metadata",
    loose: bool = False,
) -> QuerySet[Any]:
    """Rows whose JSON `field` holds every key of `metadata` with that value (JSON equality).

    Values are scalars (a string, number, boolean or None for JSON null). A key is one top-level key,
    taken literally (`a__b` is the key "a__b", never a path or a lookup). With `loose`, for values
    from a query string, a string also matches the JSON number, boolean or null it spells ("3"
    matches 3 and "3", "true" matches true and "true").
    """
    for index, (key, value) in enumerate((metadata or {}).items()):
        if not isinstance(key, str) or not key or "\x00" in key or len(key) > 255:
            raise ValidationError(f"A metadata filter key must be a non-empty string, not {key!r}")
        if not isinstance(value, METADATA_SCALARS) or (isinstance(value, str) and "\x00" in value):
            raise ValidationError(f"metadata[{key!r}]: filter values are strings, numbers, booleans or None")
        if isinstance(value, float) and not math.isfinite(value):
            raise ValidationError(f"metadata[{key!r}]: a number must be finite")
        alias = f"memproc_meta_{index}"
        queryset = queryset.alias(**{alias: KeyTransform(key, field)})
        match = Q()
        for candidate in _loose_values(value) if loose else [value]:
            match |= Q(**{alias: candidate})
        queryset = queryset.filter(match)
    return queryset


def _loose_values(value: Any) -> list[Any]:
    if not isinstance(value, str):
        return [value]
    try:
        literal = json.loads(value)
    except ValueError:
        return [value]
    is_scalar = literal is None or isinstance(literal, (bool, int, float))
    if not is_scalar or (isinstance(literal, float) and not math.isfinite(literal)):
        return [value]
    return [value, literal]
