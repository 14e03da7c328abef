"""A thread's stored summary: the reads a turn makes of it, and edits of its text (an operator's
correction, or code's), each recorded as a `SummaryRevision`. An edit writes with compare-and-swap on
the row's version, like a fold (`memproc.services.compaction.job`), so the two never both write a
revision for one version."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from memproc import models
from memproc.db import memproc_db
from memproc.exceptions import ValidationError
from memproc.models import public_thread_id
from memproc.processors.store import ThreadSummaryValue
from memproc.processors.tokens import TokenCounter, get_token_counter

__all__ = [
    "SummaryConflict",
    "summary_row_ensure",
    "summary_value",
    "thread_summary_get",
    "thread_summary_update",
]

MAX_EDIT_ATTEMPTS = 20

Source = models.SummaryRevision.Source


class SummaryConflict(ValidationError):
    """The summary changed since the editor read it (a fold or another edit): nothing was written."""

    code = "summary_conflict"


# --- reads ------------------------------------------------------------------------------------------


def thread_summary_get(*, thread_key: str) -> ThreadSummaryValue | None:
    row = (
        models.ThreadSummary.objects.filter(pk=thread_key)
        .values_list("text", "covered_sequence", "version", "counted_through", "counted_tokens")
        .first()
    )
    return None if row is None else summary_value(row)


def summary_value(row: Sequence[Any]) -> ThreadSummaryValue:
    """A summary from its columns: text, covered sequence, version, counted through, counted tokens."""
    return ThreadSummaryValue(
        text=row[0],
        covered_sequence=int(row[1]),
        version=int(row[2]),
        counted_through=int(row[3]),
        counted_tokens=int(row[4]),
    )


def summary_row_ensure(thread_key: str) -> None:
    """The thread's summary row, created empty if the thread exists and has none."""
    if models.Thread.objects.filter(pk=thread_key).exists():
        summary = models.ThreadSummary(thread_id=thread_key)
        models.ThreadSummary.objects.bulk_create([summary], ignore_conflicts=True)


# --- edits ------------------------------------------------------------------------------------------


def thread_summary_update(
    *,
    thread_key: str,
    text: str,
    source: str = Source.CODE,
    actor: Any = None,
    seen_version: int | None = None,
    counter: TokenCounter | None = None,
) -> models.ThreadSummary:
    """Replaces a thread's summary text (an operator's correction), as a new revision covering what
    it covered. With `seen_version` (what the editor read), a summary changed since is a
    SummaryConflict and nothing is written; without it, the edit applies to the newest version."""
    if not models.Thread.objects.filter(pk=thread_key).exists():
        raise ValidationError(f"No thread {public_thread_id(thread_key)!r}")
    summary_row_ensure(thread_key)
    counter = counter or get_token_counter()
    for _ in range(MAX_EDIT_ATTEMPTS):
        row = models.ThreadSummary.objects.get(pk=thread_key)
        if seen_version is not None and row.version != seen_version:
            raise SummaryConflict(
                f"The summary changed since it was read (now version {row.version}); nothing was saved."
            )
        if row.text == text:
            return row
        now = timezone.now()
        tokens = counter.count_text(text)
        with transaction.atomic(using=memproc_db()):
            updated = models.ThreadSummary.objects.filter(pk=thread_key, version=row.version).update(
                text=text, version=F("version") + 1, token_count=tokens, updated_at=now
            )
            if updated:
                models.SummaryRevision.objects.create(
                    thread_id=thread_key,
                    version=row.version + 1,
                    text=text,
                    previous_sequence=row.covered_sequence,
                    covered_sequence=row.covered_sequence,
                    token_count=tokens,
                    source=source,
                    actor=actor if getattr(actor, "is_authenticated", False) else None,
                    created_at=now,
                )
                row.refresh_from_db()
                return row
    raise SummaryConflict("The summary kept changing; the edit was not applied.")
