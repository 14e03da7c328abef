"""Working-memory writes: compare-and-swap on a version column, a revision row per change."""

from __future__ import annotations

import json
import uuid
from typing import Any

import jsonschema
from django.db import connection, transaction
from django.utils import timezone

from memproc import models
from memproc.db import insert_rows
from memproc.exceptions import MemprocError, ValidationError
from memproc.tools import schema_validator

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
        resource_ensure_raw(key)
    table = connection.ops.quote_name(model._meta.db_table)
    for _ in range(MAX_CAS_ATTEMPTS):
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT working_memory, working_memory_version FROM {table} WHERE id = %s", [key])
            row = cursor.fetchone()
        if row is None:
            raise ValidationError(f"No {scope} with id {key!r}")
        current, version = row[0], int(row[1])
        # Refusals (template guard, schema) are raised here, before anything is written.
        new = compute_next(
            current=current, value=value, template=template, schema=schema, mode=mode, replace=replace
        )
        if new == current:
            return current, version
        # No savepoint: losing the race is not a database error, only a reason to read again.
        with transaction.atomic(savepoint=False), connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {table} SET working_memory = %s, working_memory_version = %s "
                "WHERE id = %s AND working_memory_version = %s",
                [new, version + 1, key, version],
            )
            if cursor.rowcount == 1:
                revision = {
                    "id": uuid.uuid4(),
                    "scope": scope,
                    "key": key,
                    "old": current,
                    "new": new,
                    "version": version + 1,
                    "source": source,
                    "actor": actor.pk if getattr(actor, "is_authenticated", False) else None,
                    "thread_id": thread_id or (key if scope == "thread" else ""),
                    "created_at": timezone.now(),
                }
                insert_rows(models.WorkingMemoryRevision, [revision], fields=list(revision))
                return new, version + 1
    raise WorkingMemoryConflict(f"Working memory of {scope} {key!r} kept changing; update not applied")


REVISION_FIELDS = (
    "id",
    "scope",
    "key",
    "old",
    "new",
    "version",
    "source",
    "actor",
    "thread_id",
    "created_at",
)


def resource_ensure_raw(resource_id: str) -> None:
    """Creates the resource row if it is missing, in one statement."""
    insert_rows(
        models.Resource,
        [
            {
                "id": resource_id,
                "working_memory": "",
                "working_memory_version": 0,
                "metadata": {},
                "created_at": timezone.now(),
                "updated_at": timezone.now(),
            }
        ],
        fields=("id", "working_memory", "working_memory_version", "metadata", "created_at", "updated_at"),
        ignore_conflicts=True,
    )


def _model_for(scope: str) -> type[models.Thread] | type[models.Resource]:
    if scope == "thread":
        return models.Thread
    if scope == "resource":
        return models.Resource
    raise ValidationError(f"Unknown working-memory scope {scope!r}; use 'thread' or 'resource'")
