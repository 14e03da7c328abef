"""Working-memory writes: compare-and-swap on a version column, a revision row per change."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
from django.db import transaction
from django.db.models import F

from memproc import models
from memproc.exceptions import MemprocError, ValidationError

MAX_CAS_ATTEMPTS = 20

Source = models.WorkingMemoryRevision.Source


class WorkingMemoryConflict(MemprocError):
    code = "working_memory_conflict"


def deep_merge(current: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """Objects merge, `None` deletes a key, everything else (arrays included) replaces."""
    merged = dict(current)
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
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
            jsonschema.validate(merged, schema)
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


def working_memory_update(
    *,
    scope: str,
    key: str,
    value: Any,
    source: str,
    mode: str = "markdown",
    template: str = "",
    schema: dict[str, Any] | None = None,
    replace: bool = False,
    actor: Any = None,
    thread_id: str = "",
) -> tuple[str, int]:
    """Applies an update safely across processes and records a revision. Returns (text, version).

    Each attempt reads the current value and version, computes the next value, and writes it only if
    the version is unchanged (compare-and-swap); a concurrent writer makes it re-read and re-merge.
    """
    model = _model_for(scope)
    if scope == "resource":
        models.Resource.objects.get_or_create(pk=key)
    for _ in range(MAX_CAS_ATTEMPTS):
        with transaction.atomic():
            row = model.objects.filter(pk=key).values_list("working_memory", "working_memory_version").first()
            if row is None:
                raise ValidationError(f"No {scope} with id {key!r}")
            current, version = row
            new = compute_next(
                current=current, value=value, template=template, schema=schema, mode=mode, replace=replace
            )
            if new == current:
                return current, version
            updated = model.objects.filter(pk=key, working_memory_version=version).update(
                working_memory=new, working_memory_version=F("working_memory_version") + 1
            )
            if updated:
                models.WorkingMemoryRevision.objects.create(
                    scope=scope,
                    key=key,
                    old=current,
                    new=new,
                    version=version + 1,
                    source=source,
                    actor=actor if getattr(actor, "is_authenticated", False) else None,
                    thread_id=thread_id or (key if scope == "thread" else ""),
                )
                return new, version + 1
    raise WorkingMemoryConflict(f"Working memory of {scope} {key!r} kept changing; update not applied")


def _model_for(scope: str) -> type[models.Thread] | type[models.Resource]:
    if scope == "thread":
        return models.Thread
    if scope == "resource":
        return models.Resource
    raise ValidationError(f"Unknown working-memory scope {scope!r}; use 'thread' or 'resource'")
