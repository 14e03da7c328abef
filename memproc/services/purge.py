"""Deleting everything memproc stores about one resource (a user leaving, a GDPR erasure request)."""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import QuerySet, TextField
from django.db.models.functions import Cast
from django.utils import timezone

from memproc import logs, models
from memproc.conf import DEFAULT_RETENTION, settings
from memproc.db import memproc_db
from memproc.selectors.export import resource_rows
from memproc.services.attachments import attachment_delete, orphan_files_purge
from memproc.services.messages import messages_delete
from memproc.vectors import forget_cached

logger = logging.getLogger(__name__)

# Leaves first, so no cascade makes Django load rows (least of all vectors); revisions and tripwire
# logs before the threads their queries name. Attachments go before all of these (their files too).
DELETE_ORDER = (
    "pending_tool_calls",
    "embeddings",
    "working_memory_revisions",
    "turn_records",
    "tripwire_logs",
    "idempotency_records",
    "messages",
    "threads",
    "resource",
)


@dataclass(frozen=True, slots=True)
class PurgeCounts:
    """What a purge deletes (or, in a dry run, would delete)."""

    resource_id: str
    threads: int = 0
    messages: int = 0
    embeddings: int = 0
    working_memory_revisions: int = 0
    attachments: int = 0
    turn_records: int = 0
    tripwire_logs: int = 0
    idempotency_records: int = 0  # answers kept for Idempotency-Key retries: they hold the messages
    pending_tool_calls: int = 0  # suspended turns (issue 37): they hold the turn's input
    resource: int = 0  # the Resource row itself: 0 or 1

    @property
    def total(self) -> int:
        return sum(v for k, v in asdict(self).items() if k != "resource_id")

    def as_dict(self) -> dict[str, int]:
        return {k: v for k, v in asdict(self).items() if k != "resource_id"}


def resource_purge(*, resource_id: str, dry_run: bool = False) -> PurgeCounts:
    """Deletes a resource's threads, messages, embeddings, working memory (with its revisions),
    attachments, turn records, tripwire logs, suspended turns (PendingToolCall, whatever their
    state) and the answers kept for its Idempotency-Key retries
    (a repeat of such a key then runs as a new request), then the Resource row; with `dry_run`, only
    counts them.

    One transaction. Attachment files are removed from storage after it commits, never before, and
    a file still referenced by another attachment row is kept. Another resource's data is never
    touched, and purging a resource with nothing stored is a no-op.
    """
    querysets = {
        **resource_rows(resource_id=resource_id),
        "idempotency_records": _kept_answers(resource_id),
        "pending_tool_calls": models.PendingToolCall.objects.filter(resource_id=resource_id),
    }
    if dry_run:
        return PurgeCounts(resource_id=resource_id, **{k: qs.count() for k, qs in querysets.items()})
    with transaction.atomic(using=memproc_db()):
        counts = {"attachments": _attachments_delete(querysets.pop("attachments"))}
        for key in DELETE_ORDER:
            label = querysets[key].model._meta.label
            counts[key] = querysets[key].only("pk").delete()[1].get(label, 0)
        forget_cached([resource_id], using=memproc_db())
    result = PurgeCounts(resource_id=resource_id, **counts)
    logger.info("memproc: purged resource %s: %s", resource_id, result.as_dict())
    return result


def _kept_answers(resource_id: str) -> QuerySet[models.IdempotencyRecord]:
    # Not in resource_rows: an export has no use for them, a purge must not leave them.
    return models.IdempotencyRecord.objects.filter(resource_id=resource_id)


def _attachments_delete(attachments: QuerySet[models.Attachment]) -> int:
    rows = list(attachments.values_list("pk", "file"))
    if not rows:
        return 0
    pks = [pk for pk, _ in rows]
    names = {name for _, name in rows if name}
    models.Attachment.objects.filter(pk__in=pks).delete()
    shared = set(models.Attachment.objects.filter(file__in=names).values_list("file", flat=True))
    storage = models.Attachment._meta.get_field("file").storage
    doomed = sorted(names - shared)

    def remove_files() -> None:
        for name in doomed:
            try:
                storage.delete(name)
            except Exception as exc:  # a missing or unreachable file must not undo a committed purge
                logs.failure(
                    logger,
                    "memproc: could not delete attachment file %s",
                    name,
                    exc=exc,
                    level=logging.WARNING,
                )

    transaction.on_commit(remove_files, using=memproc_db())
    return len(rows)


# --- retention ------------------------------------------------------------------------------------

RETENTION_KEYS = (
    "messages_days",
    "tripwire_logs_days",
    "turn_records_days",
    "orphan_attachments_days",
    "orphan_files_days",
)
EXPIRED_BATCH = 1000


def expired_purge(*, now: datetime | None = None, dry_run: bool = False) -> dict[str, int]:
    """Deletes what the RETENTION setting says has expired: messages (with their embeddings and
    attachment files no other message uses), tripwire logs and turn records older than their number
    of days (None keeps them forever), and attachments that no message holds (uploaded but never
    sent, or left behind by a message deleted outside memproc's services) once they are
    `orphan_attachments_days` old; their files are removed from storage after commit. Files under
    memproc's folder of the attachment storage that no attachment row references (staged by a turn
    whose process was killed before its commit) go once `orphan_files_days` old (default 1: a turn in
    flight is never touched). With `dry_run` nothing is deleted and the counts say what would be.
    Messages go in batches, each its own transaction, so a long backlog never holds one huge lock.
    Idempotent: run it daily (the `memproc.purge_expired` task, or `manage.py memproc_purge
    --expired --yes` from cron). A storage that fails while the files are listed raises
    StorageUnavailable after the rows' purge is done.

    Idempotency-Key records past their own expiry (the setting IDEMPOTENCY_TTL) go too; they are
    logged, not counted in the returned dict."""
    now = now or timezone.now()
    retention = {**DEFAULT_RETENTION, **(settings.RETENTION or {})}
    counts = {
        "messages": 0,
        "orphan_attachments": 0,
        "orphan_files": 0,
        "tripwire_logs": 0,
        "turn_records": 0,
    }
    for key, model, field in (
        ("turn_records", models.TurnRecord, "started_at"),
        ("tripwire_logs", models.TripwireLog, "created_at"),
    ):
        days = retention.get(f"{key}_days")
        if days is None:
            continue
        expired = model.objects.filter(**{f"{field}__lt": now - timedelta(days=days)})
        counts[key] = expired.count() if dry_run else expired.only("pk").delete()[1].get(model._meta.label, 0)
    days = retention.get("messages_days")
    if days is not None:
        expired_messages = models.Message.objects.filter(created_at__lt=now - timedelta(days=days))
        if dry_run:
            counts["messages"] = expired_messages.count()
        else:
            counts["messages"] = _messages_delete_in_batches(expired_messages)
    days = retention.get("orphan_attachments_days")
    if days is not None:
        counts["orphan_attachments"] = orphan_attachments_purge(
            before=now - timedelta(days=days), dry_run=dry_run
        )
    keys = 0 if dry_run else idempotency_records_expire(now=now)
    days = retention.get("orphan_files_days")
    if days is not None:  # last: a storage that fails here has held back none of the rows above
        counts["orphan_files"] = orphan_files_purge(before=now - timedelta(days=days), dry_run=dry_run)
    if not dry_run and (any(counts.values()) or keys):
        logger.info("memproc: deleted expired data: %s", {**counts, "idempotency_records": keys})
    return counts


def idempotency_records_expire(*, now: datetime | None = None) -> int:
    """Deletes the Idempotency-Key records whose time is up (their repeats run as new requests)."""
    expired = models.IdempotencyRecord.objects.filter(expires_at__lte=now or timezone.now())
    return expired.delete()[1].get(models.IdempotencyRecord._meta.label, 0)


def _messages_delete_in_batches(expired: QuerySet[models.Message]) -> int:
    deleted = 0
    while True:
        ids = list(expired.values_list("id", flat=True)[:EXPIRED_BATCH])
        if not ids:
            return deleted
        deleted += messages_delete(message_keys=ids)


def orphan_attachments_purge(*, before: datetime, dry_run: bool = False) -> int:
    """Deletes attachments created before `before` that no message holds: the row now, its file
    after commit, in batches of EXPIRED_BATCH (each its own transaction). An attachment whose
    message is gone but that another message of its resource still references in its content is
    not an orphan: it is linked to that message instead (and not counted)."""
    candidates = models.Attachment.objects.filter(message__isnull=True, created_at__lt=before).order_by("pk")
    deleted = 0
    after = None
    while True:
        batch = candidates if after is None else candidates.filter(pk__gt=after)
        rows = list(batch[:EXPIRED_BATCH])
        if not rows:
            return deleted
        after = rows[-1].pk
        with transaction.atomic(using=memproc_db()):
            for attachment in rows:
                holder = _referencing_message(attachment)
                if holder is not None:
                    if not dry_run:
                        models.Attachment.objects.filter(pk=attachment.pk).update(message_id=holder)
                    continue
                if not dry_run:
                    attachment_delete(attachment=attachment)
                deleted += 1


def _referencing_message(attachment: models.Attachment) -> str | None:
    return (
        models.Message.objects.filter(resource_id=attachment.resource_id)
        .annotate(content_text=Cast("content", TextField()))
        .filter(content_text__contains=str(attachment.pk))
        .values_list("pk", flat=True)
        .first()
    )
