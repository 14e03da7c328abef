"""Working-memory writes: compare-and-swap on a version column, a revision row per change."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import transaction

from memproc import models
from memproc.db import memproc_db
from memproc.exceptions import MemprocError, ValidationError
from memproc.models import public_thread_id, split_thread_key
from memproc.processors.working_memory import check_size
from memproc.processors.working_memory_fields import field_set, keep_pinned
from memproc.processors.working_memory_values import (  # noqa: F401  (re-exported)
    compute_next,
    deep_merge,
    next_markdown,
    next_schema_value,
    normalise,
    parse_json_memory,
)
from memproc.signals import send_after_commit, working_memory_updated

MAX_CAS_ATTEMPTS = 20

Source = models.WorkingMemoryRevision.Source


class WorkingMemoryConflict(MemprocError):
    code = "working_memory_conflict"


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
    thread_key: str = "",
    resource_id: str = "",
    agent_id: str = "",
    max_tokens: int | None = None,
    expected: tuple[str, int] | None = None,
    field: str | None = None,
    pinned: Sequence[str] = (),
    turn_id: Any = None,
    message_ids: Sequence[str] = (),
) -> tuple[str, int]:
    """Applies an update safely across processes and records a revision. Returns (text, version).
    `key` is the thread's key (scope "thread", see `models.thread_key`) or the resource id;
    `thread_key` names the thread whose turn made a resource-scope change.
    A result longer than `max_tokens` (TOKENIZER's count) is a ValidationError; nothing is written.

    Each attempt reads the current value and version, computes the next value, and writes it only if
    the version is unchanged (compare-and-swap); a concurrent writer makes it re-read and re-merge.
    `expected`, the (text, version) the caller read (a turn, at its start), stands for the first read.
    With `field`, `value` is that one field's new value (`field_set`: a correction in the memory
    view), applied to the value each attempt reads. `pinned` names fields whose values the update
    keeps (`keep_pinned`: the model's updates, with the pins its turn read).
    `turn_id` and `message_ids` (message keys) are the revision's lineage: the turn that made the
    change and the messages it saved.
    """
    model = _model_for(scope)
    alias = memproc_db()
    if scope == "resource":
        models.Resource.objects.using(alias).bulk_create([models.Resource(pk=key)], ignore_conflicts=True)
    rows = model.objects.using(alias).filter(pk=key)
    for attempt in range(MAX_CAS_ATTEMPTS):
        if attempt == 0 and expected is not None:
            row: tuple[str, int] | None = expected
        else:
            row = rows.values_list("working_memory", "working_memory_version").first()
        if row is None:
            shown = public_thread_id(key) if scope == "thread" else key
            raise ValidationError(f"No {scope} with id {shown!r}")
        current, version = row[0], int(row[1])
        # Refusals (template guard, schema) are raised here, before anything is written.
        if field is not None:
            new = field_set(
                current=current, name=field, value=value, mode=mode, template=template, schema=schema
            )
        else:
            new = compute_next(
                current=current, value=value, template=template, schema=schema, mode=mode, replace=replace
            )
        new, _ = keep_pinned(current=current, new=new, pinned=pinned, mode=mode, template=template)
        if new == current:
            return current, version
        check_size(new, max_tokens=max_tokens)
        # No savepoint: losing the race is not a database error, only a reason to read again.
        with transaction.atomic(using=alias, savepoint=False):
            swapped = rows.filter(working_memory_version=version).update(
                working_memory=new, working_memory_version=version + 1
            )
            if swapped:
                models.WorkingMemoryRevision.objects.using(alias).create(
                    scope=scope,
                    key=key,
                    old=current,
                    new=new,
                    version=version + 1,
                    source=source,
                    actor=actor if getattr(actor, "is_authenticated", False) else None,
                    thread_id=thread_key or (key if scope == "thread" else ""),
                    turn_id=turn_id,
                    message_ids=list(message_ids),
                )
                send_after_commit(
                    working_memory_updated,
                    models.WorkingMemoryRevision,
                    scope=scope,
                    key=public_thread_id(key) if scope == "thread" else key,
                    version=version + 1,
                    source=source,
                    text=new,
                    agent_id=agent_id,
                    thread_id=public_thread_id(thread_key or (key if scope == "thread" else "")),
                    resource_id=key if scope == "resource" else split_thread_key(key)[0] or resource_id,
                )
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
    "turn_id",
    "message_ids",
    "created_at",
)


def _model_for(scope: str) -> type[models.Thread] | type[models.Resource]:
    if scope == "thread":
        return models.Thread
    if scope == "resource":
        return models.Resource
    raise ValidationError(f"Unknown working-memory scope {scope!r}; use 'thread' or 'resource'")
