"""Working memory by field: the fields of a template-Markdown or JSON working memory, setting one, and
keeping the ones a user pinned.

A Markdown field is a top-level template line `- **Name**: value` (continuation lines indented under
it belong to its value); a JSON field is a top-level key (the schema's properties, then any other key
stored). Pure functions, beside the value rules they extend (working_memory_values), because the
update tool and the service both keep pinned fields: the tool to tell the model, the service under
compare-and-swap.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from memproc.exceptions import ValidationError
from memproc.processors.working_memory_values import next_schema_value, parse_json_memory

__all__ = ["MemoryField", "field_set", "fields_of", "keep_pinned"]

# Unindented, so a value's own continuation lines can never start a field.
FIELD_LINE = re.compile(r"^[-*][ \t]+\*\*(?P<name>[^*\n]+?)\*\*:[ \t]?(?P<value>.*)$")


@dataclass(frozen=True, slots=True)
class MemoryField:
    name: str
    value: Any  # Markdown: the text ("" when empty); JSON: the stored value (None when absent)


def fields_of(
    *, text: str, mode: str, template: str = "", schema: dict[str, Any] | None = None
) -> list[MemoryField]:
    """The fields in order: the template's (or schema's), then any others the text holds."""
    if mode == "schema":
        data = parse_json_memory(text)
        names = [*((schema or {}).get("properties") or {}), *data]
        return [MemoryField(name, data.get(name)) for name in dict.fromkeys(names)]
    values = dict(_markdown_fields(text))
    names = [name for name, _ in _markdown_fields(template)] + list(values)
    return [MemoryField(name, values.get(name, "")) for name in dict.fromkeys(names)]


def field_set(
    *,
    current: str,
    name: str,
    value: Any,
    mode: str,
    template: str = "",
    schema: dict[str, Any] | None = None,
) -> str:
    """The working memory with field `name` set to `value` (JSON: `None` removes the key), validated
    as any update is. A field that is neither in the text nor the template (schema) is a
    ValidationError."""
    if name not in {f.name for f in fields_of(text=current, mode=mode, template=template, schema=schema)}:
        raise ValidationError(f"No working-memory field {name!r}")
    if mode == "schema":
        return next_schema_value(current=current, patch={name: value}, schema=schema)
    if not isinstance(value, str):
        raise ValidationError("A Markdown field's value is text")
    return _markdown_set(current.strip() and current or template, name, value)


def keep_pinned(
    *,
    current: str,
    new: str,
    pinned: Iterable[str],
    mode: str,
    template: str = "",
) -> tuple[str, list[str]]:
    """`new` with each pinned field as it is in `current`, and the names of those the update had
    changed (the model is told which it could not change)."""
    pinned = list(dict.fromkeys(pinned))
    if not pinned or new == current:
        return new, []
    if mode == "schema":
        before, after = parse_json_memory(current), parse_json_memory(new)
        kept = [n for n in pinned if before.get(n) != after.get(n) or (n in before) != (n in after)]
        for name in kept:
            if name in before:
                after[name] = before[name]
            else:
                after.pop(name, None)
        return (json.dumps(after, ensure_ascii=False, sort_keys=True) if kept else new), kept
    base = current if current.strip() else template
    before_md, after_md = dict(_markdown_fields(base)), dict(_markdown_fields(new))
    kept = [n for n in pinned if n in before_md and after_md.get(n) != before_md[n]]
    for name in kept:
        new = _markdown_set(new, name, before_md[name])
    return new, kept


def _markdown_fields(text: str) -> list[tuple[str, str]]:
    """(name, value) of each field line, its indented continuation lines joined to its value."""
    out: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        match = FIELD_LINE.match(line)
        if match:
            out.append((match["name"].strip(), [match["value"].rstrip()]))
        elif out and line[:1] in (" ", "\t") and line.strip():
            out[-1][1].append(line.strip())
        elif out and line.strip():
            out.append(("", []))  # an unindented line ends the field before it
    return [(name, "\n".join(v for v in lines if v).strip()) for name, lines in out if name]


def _markdown_set(text: str, name: str, value: str) -> str:
    """`text` with field `name`'s line (and its continuation lines) replaced; appended if missing.
    A multi-line value continues on indented lines, so it cannot start another field."""
    first, *rest = value.strip().splitlines() or [""]
    block = [f"- **{name}**:" + (f" {first.strip()}" if first.strip() else "")]
    block += [f"  {line.strip()}" for line in rest if line.strip()]
    lines = text.splitlines()
    for i, line in enumerate(lines):
        match = FIELD_LINE.match(line)
        if match and match["name"].strip() == name:
            end = i + 1
            while end < len(lines) and lines[end][:1] in (" ", "\t") and lines[end].strip():
                end += 1
            return "\n".join([*lines[:i], *block, *lines[end:]])
    return "\n".join([*lines, *block]) if lines else "\n".join(block)
