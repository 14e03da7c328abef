"""Working-memory values: the pure rules for the next value (Markdown replace, JSON deep merge).

They live in the processor layer because the `updateWorkingMemory` tool checks an update at once
(the model sees a refusal as a tool error); the service applies the same rules under compare-and-swap.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema

from memproc.exceptions import ValidationError
from memproc.tools import schema_validator

__all__ = [
    "compute_next",
    "deep_merge",
    "next_markdown",
    "next_schema_value",
    "normalise",
    "parse_json_memory",
]


def deep_merge(current: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """Objects merge, `None` deletes a key, everything else (arrays included) replaces. An object
    that replaces a missing key or a non-object is merged into an empty one, so a `None` inside it
    stores no null either."""
    merged = dict(current)
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, dict):
            old = merged.get(key)
            merged[key] = deep_merge(old if isinstance(old, dict) else {}, value)
        else:
            merged[key] = value
    return merged


def parse_json_memory(text: str) -> dict[str, Any]:
    if not text.strip():
        return {}
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def normalise(text: str) -> str:
    return "\n".join(line.strip() for line in text.strip().splitlines() if line.strip())


def next_markdown(*, current: str, new: str, template: str) -> str:
    """Markdown mode replaces the whole text, but an empty template never overwrites real data."""
    if not isinstance(new, str):
        raise ValidationError("Working memory must be Markdown text")
    if (
        current.strip()
        and normalise(new) == normalise(template)
        and normalise(current) != normalise(template)
    ):
        raise ValidationError(
            "Refused: the update equals the empty template and would erase the existing working memory"
        )
    return new


def next_schema_value(*, current: str, patch: Any, schema: dict[str, Any] | None) -> str:
    if isinstance(patch, str):
        try:
            patch = json.loads(patch)
        except ValueError as exc:
            raise ValidationError("Working memory update must be a JSON object") from exc
    if not isinstance(patch, dict):
        raise ValidationError("Working memory update must be a JSON object")
    merged = deep_merge(parse_json_memory(current), patch)
    if schema:
        try:
            schema_validator(schema).validate(merged)
        except jsonschema.ValidationError as exc:
            path = "/".join(str(p) for p in exc.absolute_path) or "(root)"
            raise ValidationError(
                f"Working memory does not match the schema at {path}: {exc.message}"
            ) from exc
    return json.dumps(merged, ensure_ascii=False, sort_keys=True)


def compute_next(
    *,
    current: str,
    value: Any,
    template: str = "",
    schema: dict[str, Any] | None = None,
    mode: str = "markdown",
    replace: bool = False,
) -> str:
    if mode == "schema":
        return next_schema_value(current="" if replace else current, patch=value, schema=schema)
    return next_markdown(current=current, new=value, template=template)
