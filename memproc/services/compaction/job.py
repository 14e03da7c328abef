"""The fold job: scheduled by a turn's commit, run in the background.

A turn's MessageHistory asks for a fold that is due (`turn.writes.compaction`); the turn's commit
enqueues `memproc.compact_thread` in its own transaction (inline or Celery, through the outbox), so
it runs after commit. The job is idempotent and runs one at a time per thread: it claims the
thread's summary row with a conditional UPDATE (a lease), and writes each fold with compare-and-swap
on the row's version, so two jobs (or a job and an operator's edit) never both write a revision for
one version. Folds are incremental: the new summary is made from the last one and the messages it
did not cover yet; each is recorded as a `SummaryRevision` with the sequences it covers.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from memproc import background, models
from memproc.db import memproc_db
from memproc.messages import Message
from memproc.models import public_thread_id, split_thread_key
from memproc.processors.compaction import EXTRACTIVE, fold_chunks, foldable
from memproc.processors.tokens import TokenCounter, get_token_counter
from memproc.selectors.messages import MESSAGE_FIELDS, message_from_row
from memproc.services.compaction.summarizers import Summarizer, summarizer_for
from memproc.services.compaction.summary import summary_row_ensure

__all__ = ["compaction_enqueue", "thread_compact"]

TASK_NAME = "memproc.compact_thread"
# A job holds its thread this long; one that dies releases it by expiry.
CLAIM_LEASE = timedelta(minutes=10)
# One fold reads at most this multiple of trigger_tokens of messages (a backlog takes several folds).
CHUNK_FACTOR = 2
MAX_FOLDS_PER_JOB = 8
# A job reads at most this many messages; what is left is folded by the next one.
MAX_ROWS_PER_JOB = 5000

Source = models.SummaryRevision.Source


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
        summary_row_ensure(thread_key)
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
