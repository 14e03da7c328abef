"""Compaction of long threads (`Memory(compaction=...)`): the background job that folds messages into
a thread's stored summary, edits of the summary, and the reads a turn makes of it.

A turn's MessageHistory notes in `turn.info["compaction"]` that a fold is due; the turn's commit
enqueues `memproc.compact_thread` in its own transaction (inline or Celery, through the outbox), so
it runs after commit. The job is idempotent and runs one at a time per thread: it claims the
thread's summary row with a conditional UPDATE (a lease), and writes each fold with compare-and-swap
on the row's version, so two jobs (or a job and an operator's edit) never both write a revision for
one version. Folds are incremental: the new summary is made from the last one and the messages it
did not cover yet; each is recorded as a `SummaryRevision` with the sequences it covers.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence
from datetime import timedelta
from typing import Any, Protocol

from asgiref.sync import async_to_sync
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from memproc import background, models
from memproc.db import memproc_db
from memproc.exceptions import ValidationError
from memproc.llm import resolve_model
from memproc.llm.types import ModelRequest
from memproc.messages import Message, thaw
from memproc.models import public_thread_id, split_thread_key
from memproc.processors.compaction import (
    EXTRACTIVE,
    OFFLINE_MODELS,
    ExtractiveSummarizer,
    fold_chunks,
    foldable,
)
from memproc.processors.store import ThreadSummaryValue
from memproc.processors.token_limiter import truncate_to_tokens
from memproc.processors.tokens import TokenCounter, get_token_counter
from memproc.selectors.messages import MESSAGE_FIELDS, message_from_row

__all__ = [
    "ModelSummarizer",
    "SummaryConflict",
    "compaction_enqueue",
    "summarizer_for",
    "summary_value",
    "thread_compact",
    "thread_summary_get",
    "thread_summary_update",
]

logger = logging.getLogger(__name__)

TASK_NAME = "memproc.compact_thread"
# A job holds its thread this long; one that dies releases it by expiry.
CLAIM_LEASE = timedelta(minutes=10)
# One fold reads at most this multiple of trigger_tokens of messages (a backlog takes several folds).
CHUNK_FACTOR = 2
MAX_FOLDS_PER_JOB = 8
# A job reads at most this many messages; what is left is folded by the next one.
MAX_ROWS_PER_JOB = 5000
MAX_EDIT_ATTEMPTS = 20

Source = models.SummaryRevision.Source


class SummaryConflict(ValidationError):
    """The summary changed since the editor read it (a fold or another edit): nothing was written."""

    code = "summary_conflict"


class Summarizer(Protocol):
    id: str

    def summarize(
        self, *, previous: str, messages: Sequence[Message], budget: int, counter: TokenCounter
    ) -> str: ...


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


# --- summarizers ------------------------------------------------------------------------------------

SUMMARY_INSTRUCTIONS = """You keep the running summary of a long conversation between a user and an \
assistant. You get the current summary and the messages that came after it. Write the new summary: \
merge what is new into it; keep every fact the user stated about themselves, their preferences, \
decisions, names, numbers, dates and open tasks; drop greetings and small talk. Write short \
Markdown bullet points, at most {budget} tokens. Answer with the summary alone."""

MAX_TRANSCRIPT_WORDS = 300  # per message: a tool result can be a whole document


class ModelSummarizer:
    """Summarizes with a chat model (the agent's, or the one `compaction={"model": ...}` names). An
    answer over the budget is cut to it; an empty answer falls back to the extractive summarizer."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.id = str(getattr(model, "id", "") or type(model).__name__)

    def summarize(
        self, *, previous: str, messages: Sequence[Message], budget: int, counter: TokenCounter
    ) -> str:
        request = ModelRequest(
            messages=[
                Message.create("system", SUMMARY_INSTRUCTIONS.format(budget=budget)),
                Message.create("user", _transcript(previous, messages)),
            ],
            tools=[],
        )
        if hasattr(self.model, "generate"):
            response = self.model.generate(request)
        else:
            response = async_to_sync(self.model.agenerate)(request)
        text = (response.text or "").strip()
        if not text:
            logger.warning("memproc: summarizer %s answered nothing; the fold is extractive", self.id)
            return ExtractiveSummarizer().summarize(
                previous=previous, messages=messages, budget=budget, counter=counter
            )
        return truncate_to_tokens(counter, text, budget)


def _transcript(previous: str, messages: Sequence[Message]) -> str:
    lines = []
    for message in messages:
        pieces = [message.text] if message.text.strip() else []
        pieces += [f"[calls {c.tool_name} {thaw(c.args)!r}]" for c in message.tool_calls]
        pieces += [f"[{r.tool_name} returned {thaw(r.result)!r}]" for r in message.tool_results]
        words = " ".join(pieces).split()
        if words:
            clipped = " ".join(words[:MAX_TRANSCRIPT_WORDS]) + (
                " …" if len(words) > MAX_TRANSCRIPT_WORDS else ""
            )
            lines.append(f"{message.role}: {clipped}")
    body = "\n".join(lines)
    return (
        f"<current_summary>\n{previous or '(none yet)'}\n</current_summary>\n"
        f"<new_messages>\n{body}\n</new_messages>"
    )


def summarizer_for(model: Any) -> Summarizer:
    """The summarizer for a model: "extractive" and "local/echo" (or an object whose id it is) get the
    offline extractive one; a "provider/model" string is resolved (None: the DEFAULT_MODEL setting);
    an object is used."""
    if model == EXTRACTIVE or (isinstance(model, str) and model in OFFLINE_MODELS):
        return ExtractiveSummarizer()
    if model is None or isinstance(model, str):
        model = resolve_model(model)
    if getattr(model, "id", None) in OFFLINE_MODELS:
        return ExtractiveSummarizer()
    return ModelSummarizer(model)


# --- the job ----------------------------------------------------------------------------------------


def thread_compact(
    *,
    thread_key: str,
    trigger_tokens: int,
    keep_tokens: int,
    through_sequence: int | None = None,
    model: Any = EXTRACTIVE,
    counter: TokenCounter | None = None,
    max_folds: int = MAX_FOLDS_PER_JOB,
) -> list[models.SummaryRevision]:
    """Folds the thread's messages after its summary, through `through_sequence` (None: the last),
    into the summary, when they hold `trigger_tokens` or more; returns the revisions written.

    Idempotent and one at a time per thread: a thread held by another job, a range already
    covered, or too few tokens do nothing. A fold never ends inside a tool call pair. An edit (or a
    job that took over an expired claim) between the read and the write wins: the fold is dropped.
    Raises the summarizer's errors (ModelUnavailableError and ModelRateLimitError are transient).
    """
    counter = counter or get_token_counter()
    summarizer = summarizer_for(model)
    token = uuid.uuid4()
    if not _claim(thread_key, token):
        _row_ensure(thread_key)
        if not _claim(thread_key, token):
            return []  # another job holds it (or the thread is gone)
    counted: dict[str, int] = {}
    try:
        return _fold(
            thread_key=thread_key,
            token=token,
            through_sequence=through_sequence,
            trigger_tokens=trigger_tokens,
            keep_tokens=keep_tokens,
            summarizer=summarizer,
            counter=counter,
            max_folds=max_folds,
            counted=counted,
        )
    finally:
        models.ThreadSummary.objects.filter(pk=thread_key, claim_token=token).update(
            claim_token=None, claimed_until=None, **counted
        )


def _fold(
    *,
    thread_key: str,
    token: uuid.UUID,
    through_sequence: int | None,
    trigger_tokens: int,
    keep_tokens: int,
    summarizer: Summarizer,
    counter: TokenCounter,
    max_folds: int,
    counted: dict[str, int],
) -> list[models.SummaryRevision]:
    state = (
        models.ThreadSummary.objects.filter(pk=thread_key)
        .values_list("text", "covered_sequence", "version", "thread__last_sequence")
        .first()
    )
    if state is None:
        return []
    text, covered, version, last = state
    through = last if through_sequence is None else min(through_sequence, last)
    if through <= covered:
        return []
    messages = foldable(_messages_between(thread_key, covered, through))
    costs = [counter.count_message(m) for m in messages]
    if sum(costs) < trigger_tokens:  # the turn's estimate was high: note the count for the next ones
        counted.update(counted_through=through, counted_tokens=sum(costs))
        return []
    revisions: list[models.SummaryRevision] = []
    by_id = dict(zip((m.id for m in messages), costs, strict=True))
    for chunk in fold_chunks(messages, costs, limit=CHUNK_FACTOR * trigger_tokens)[:max_folds]:
        started = time.perf_counter()
        new_text = summarizer.summarize(previous=text, messages=chunk, budget=keep_tokens, counter=counter)
        revision = _fold_write(
            thread_key=thread_key,
            token=token,
            version=version,
            previous_sequence=covered,
            covered_sequence=int(chunk[-1].sequence or covered),
            text=new_text,
            folded=chunk,
            folded_tokens=sum(by_id[m.id] for m in chunk),
            summarizer=summarizer.id,
            duration_ms=(time.perf_counter() - started) * 1000,
            counter=counter,
        )
        if revision is None:
            break  # an edit, or a job that took over an expired claim, changed it meanwhile
        revisions.append(revision)
        text, covered, version = revision.text, revision.covered_sequence, revision.version
    return revisions


def _claim(thread_key: str, token: uuid.UUID) -> bool:
    now = timezone.now()
    return bool(
        models.ThreadSummary.objects.filter(pk=thread_key)
        .filter(Q(claimed_until__isnull=True) | Q(claimed_until__lt=now))
        .update(claim_token=token, claimed_until=now + CLAIM_LEASE)
    )


def _row_ensure(thread_key: str) -> None:
    """The thread's summary row, created empty if the thread exists and has none."""
    if models.Thread.objects.filter(pk=thread_key).exists():
        summary = models.ThreadSummary(thread_id=thread_key)
        models.ThreadSummary.objects.bulk_create([summary], ignore_conflicts=True)


def _messages_between(thread_key: str, after: int, through: int) -> list[Message]:
    """The thread's messages in the range, in order, without those a guardrail quarantined: a summary
    is never built from them (blocked turns are not stored at all)."""
    rows = (
        models.Message.objects.filter(
            thread_id=thread_key, sequence__gt=after, sequence__lte=through, quarantined=False
        )
        .order_by("sequence")
        .values(*MESSAGE_FIELDS)[:MAX_ROWS_PER_JOB]
    )
    return [message_from_row(row) for row in rows]


def _fold_write(
    *,
    thread_key: str,
    token: uuid.UUID,
    version: int,
    previous_sequence: int,
    covered_sequence: int,
    text: str,
    folded: Sequence[Message],
    folded_tokens: int,
    summarizer: str,
    duration_ms: float,
    counter: TokenCounter,
) -> models.SummaryRevision | None:
    """Compare-and-swap: written only if the row still has `version` and this job's claim."""
    now = timezone.now()
    tokens = counter.count_text(text)
    with transaction.atomic(using=memproc_db()):
        updated = models.ThreadSummary.objects.filter(
            pk=thread_key, version=version, claim_token=token
        ).update(
            text=text,
            covered_sequence=covered_sequence,
            version=version + 1,
            token_count=tokens,
            counted_through=0,
            counted_tokens=0,
            updated_at=now,
        )
        if not updated:
            return None
        return models.SummaryRevision.objects.create(
            thread_id=thread_key,
            version=version + 1,
            text=text,
            previous_sequence=previous_sequence,
            covered_sequence=covered_sequence,
            token_count=tokens,
            folded_messages=len(folded),
            folded_tokens=folded_tokens,
            source=Source.COMPACTION,
            summarizer=summarizer,
            duration_ms=duration_ms,
            created_at=now,
        )


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
    _row_ensure(thread_key)
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


# --- scheduling -------------------------------------------------------------------------------------


def compaction_enqueue(*, thread_key: str, agent_id: str, request: dict[str, Any]) -> None:
    """Schedules a fold (after the current transaction commits; at once outside one)."""
    background.enqueue(
        TASK_NAME,
        kwargs={
            "thread_id": public_thread_id(thread_key),
            "resource_id": split_thread_key(thread_key)[0],
            "through_sequence": int(request["through_sequence"]),
            "trigger_tokens": int(request["trigger_tokens"]),
            "keep_tokens": int(request["keep_tokens"]),
            "model": request.get("model"),
            "agent_id": agent_id or None,
            "agent_model": request.get("agent_model"),
        },
    )
