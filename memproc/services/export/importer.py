"""Writing an export document's rows into this database: idempotent, all or nothing, conflicts listed."""

from __future__ import annotations

import hashlib
import logging
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from itertools import groupby
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Max

from memproc import background, logs, models
from memproc.db import memproc_db
from memproc.exceptions import ValidationError
from memproc.models import public_thread_id
from memproc.processors.attachment_types import CheckedFile
from memproc.services.attachments.files import attachment_storage, file_delete, file_save
from memproc.services.export.reader import Rows, document_rows
from memproc.services.forget.imports import forgotten_rows_drop
from memproc.services.recall import EMBEDDABLE_ROLES

logger = logging.getLogger(__name__)

FileSource = Callable[[str], "bytes | None"]
EMBED_BATCH = 500


class ImportConflict(ValidationError):
    """Ids of the document are used differently in this database; nothing was imported."""

    code = "import_conflict"

    def __init__(self, conflicts: list[str]) -> None:
        self.conflicts = conflicts
        shown = "; ".join(conflicts[:10]) + ("; ..." if len(conflicts) > 10 else "")
        super().__init__(f"{len(conflicts)} conflict(s), nothing was imported: {shown}")


@dataclass
class ImportReport:
    """What an import wrote (`created`), found stored already and left as it was (`existing`), and
    could not restore: `missing_files` (attachment ids whose bytes were neither in the archive nor
    in the storage: skipped), `unknown_users` (usernames not found here: stored as no user)."""

    resource_id: str
    created: dict[str, int] = field(default_factory=dict)
    existing: dict[str, int] = field(default_factory=dict)
    missing_files: list[str] = field(default_factory=list)
    unknown_users: list[str] = field(default_factory=list)
    embedding_jobs: int = 0
    forgotten: int = 0  # messages left out: a forget receipt of the resource names them


def resource_import(
    *, document: Mapping[str, Any], files: FileSource | None = None, embed: bool = True
) -> ImportReport:
    """Reads an export document back, into this database or another one.

    Idempotent: a row already stored with the same id and owner is left as it is (counted as
    existing), so importing twice changes nothing; an existing resource keeps its working memory and
    metadata, an existing thread its own (new messages join it). A thread id names a thread within
    its resource: another resource's thread of the same id is no conflict. All or nothing: a
    conflict raises ImportConflict listing every one before anything is written (a message id of
    another thread or stored with another role or text, a message whose place in its thread is
    taken, an attachment id of another resource, a file the resource already holds as another
    attachment).

    Messages, threads and resources forgotten since the export (memproc.services.forget) are
    left out, with what came from them; `forgotten` counts the messages.

    Attachment bytes come from `files` (attachment id -> bytes, see `archive_read`) and must match
    their sha256; without them, the file named in the document is used if this site's storage has
    it; otherwise the attachment is skipped and reported. Files written for an import that fails
    are deleted. Embeddings are rebuilt after commit (`embed`): one `memproc.embed_messages` job per
    agent and 500 messages, through `memproc.background`.
    """
    rows = document_rows(document)
    saved_files: list[str] = []
    try:
        with transaction.atomic(using=memproc_db()):
            forgotten = forgotten_rows_drop(rows)
            report = _Import(rows).run(files=files, saved_files=saved_files, embed=embed)
            report.forgotten = forgotten
    except BaseException:
        storage = attachment_storage()
        for name in saved_files:
            file_delete(storage, name)
        raise
    logger.info("memproc: imported resource %s: %s", report.resource_id, report.created)
    return report


class _Import:
    def __init__(self, rows: Rows) -> None:
        self.rows = rows
        self.report = ImportReport(resource_id=rows.resource.pk)
        self.conflicts: list[str] = []

    def run(self, *, files: FileSource | None, saved_files: list[str], embed: bool) -> ImportReport:
        rows = self.rows
        threads = self.new_threads()
        messages = self.new_messages()
        attachments = self.new_attachments()
        if self.conflicts:
            raise ImportConflict(self.conflicts)
        self.resource_write()
        models.Thread.objects.bulk_create(threads, batch_size=500)
        models.Message.objects.bulk_create(messages, batch_size=1000)
        # A summary comes with its thread: only new threads get one (an existing thread keeps its own).
        new_ids = {t.pk for t in threads}
        models.ThreadSummary.objects.bulk_create([s for s in rows.summaries if s.thread_id in new_ids])
        self.sequences_settle({m.thread_id for m in messages} - {t.pk for t in threads})
        written = self.attachments_write(attachments, files, saved_files)
        users = _Users(self.report)
        revisions = _absent(rows.revisions)
        for revision in revisions:
            revision.actor = users(rows.actors.get(revision.pk))
        models.WorkingMemoryRevision.objects.bulk_create(revisions, batch_size=500)
        tripwires = _absent(rows.tripwires)
        for log in tripwires:
            log.reviewed_by = users(rows.reviewers.get(log.pk))
        models.TripwireLog.objects.bulk_create(tripwires, batch_size=500)
        turns = _absent(rows.turns)
        logs = {t.tripwire_id for t in turns if t.tripwire_id}
        known_logs = set(models.TripwireLog.objects.filter(pk__in=logs).values_list("pk", flat=True))
        for turn in turns:
            if turn.tripwire_id not in known_logs:  # a log kept by another resource's export
                turn.tripwire_id = None
        models.TurnRecord.objects.bulk_create(turns, batch_size=500)
        pending = _absent(rows.pending)
        for call in pending:
            call.decided_by = users(rows.deciders.get(call.pk))
        models.PendingToolCall.objects.bulk_create(pending, batch_size=500)
        self.count("threads", len(threads), len(rows.threads))
        self.count("messages", len(messages), len(rows.messages))
        self.count("attachments", written, len(rows.attachments) - len(self.report.missing_files))
        self.count("working_memory_revisions", len(revisions), len(rows.revisions))
        self.count("turn_records", len(turns), len(rows.turns))
        self.count("tripwire_logs", len(tripwires), len(rows.tripwires))
        self.count("pending_tool_calls", len(pending), len(rows.pending))
        if embed:
            self.report.embedding_jobs = _embeddings_enqueue(messages, rows.threads)
        return self.report

    def count(self, kind: str, created: int, total: int) -> None:
        self.report.created[kind] = created
        self.report.existing[kind] = total - created

    def resource_write(self) -> None:
        resource = self.rows.resource
        exists = models.Resource.objects.filter(pk=resource.pk).exists()
        if not exists:
            exported_time = resource.updated_at
            resource.save(force_insert=True)
            # `updated_at` is auto_now (the save set it to now): put the exported time back.
            models.Resource.objects.filter(pk=resource.pk).update(updated_at=exported_time)
        self.count("resource", int(not exists), 1)

    def new_threads(self) -> list[models.Thread]:
        """The document's threads the resource does not hold yet. Their keys name the resource, so a
        stored one is the resource's own thread of that id (kept as it is), never another's."""
        threads = self.rows.threads
        stored = set(
            models.Thread.objects.filter(pk__in=[t.pk for t in threads]).values_list("pk", flat=True)
        )
        return [t for t in threads if t.pk not in stored]

    def new_messages(self) -> list[models.Message]:
        messages = self.rows.messages
        for message_id, times in Counter(m.public_id for m in messages).items():
            if times > 1:
                self.conflicts.append(f"message {message_id!r} is in the document {times} times")
        for (key, sequence), times in Counter((m.thread_id, m.sequence) for m in messages).items():
            if times > 1:
                self.conflicts.append(
                    f"thread {public_thread_id(key)!r} has {times} messages at sequence {sequence}"
                )
        stored = {
            pk: rest
            for pk, *rest in models.Message.objects.filter(pk__in=[m.pk for m in messages]).values_list(
                "pk", "thread_id", "role", "text"
            )
        }
        new = []
        for message in messages:
            found = stored.get(message.pk)
            if found is None:
                new.append(message)
            elif found[0] != message.thread_id:
                self.conflicts.append(f"message {message.public_id!r} is stored in another thread here")
            elif (found[1], found[2]) != (message.role, message.text):
                self.conflicts.append(
                    f"message {message.public_id!r} is stored here with another role or text"
                )
        taken = set(
            models.Message.objects.filter(
                thread_id__in={m.thread_id for m in new}, sequence__in={m.sequence for m in new}
            ).values_list("thread_id", "sequence")
        )
        for message in new:
            if (message.thread_id, message.sequence) in taken:
                self.conflicts.append(
                    f"message {message.public_id!r}: its place (sequence {message.sequence}) in thread "
                    f"{public_thread_id(message.thread_id)!r} is taken by another message here"
                )
        return new

    def new_attachments(self) -> list[models.Attachment]:
        attachments = self.rows.attachments
        resource_id = self.rows.resource.pk
        owners = dict(
            models.Attachment.objects.filter(pk__in=[a.pk for a in attachments]).values_list(
                "pk", "resource_id"
            )
        )
        holders = dict(
            models.Attachment.objects.filter(
                resource_id=resource_id, sha256__in=[a.sha256 for a in attachments if a.sha256]
            ).values_list("sha256", "pk")
        )
        new = []
        for attachment in attachments:
            if attachment.pk in owners:
                if owners[attachment.pk] != resource_id:
                    self.conflicts.append(f"attachment {attachment.pk} belongs to another resource here")
            elif attachment.sha256 and holders.get(attachment.sha256, attachment.pk) != attachment.pk:
                self.conflicts.append(
                    f"attachment {attachment.pk}: the resource holds the same file as attachment "
                    f"{holders[attachment.sha256]}"
                )
            else:
                new.append(attachment)
        return new

    def attachments_write(
        self, attachments: list[models.Attachment], files: FileSource | None, saved_files: list[str]
    ) -> int:
        storage = attachment_storage()
        linked = {a.message_id for a in attachments if a.message_id}
        messages = set(models.Message.objects.filter(pk__in=linked).values_list("pk", flat=True))
        rows = []
        for attachment in attachments:
            exported_name = self.rows.files.get(attachment.pk, "")
            data = files(str(attachment.pk)) if files is not None else None
            if exported_name and _holds(storage, exported_name, attachment.sha256):
                attachment.file = exported_name  # the file is still here (the same bytes): reuse it
            elif data is not None:
                if hashlib.sha256(data).hexdigest() != attachment.sha256 or len(data) != attachment.size:
                    raise ValidationError(
                        f"attachment {attachment.pk}: the file does not match its sha256 and size"
                    )
                checked = CheckedFile(data, attachment.content_type, attachment.name, attachment.sha256)
                name = file_save(
                    attachment_id=attachment.pk, resource_id=attachment.resource_id, file=checked
                )
                saved_files.append(name)
                attachment.file = name
            else:
                self.report.missing_files.append(str(attachment.pk))
                continue
            if attachment.message_id not in messages:
                attachment.message_id = None  # linked again when a saved message references it
            rows.append(attachment)
        models.Attachment.objects.bulk_create(rows, batch_size=500)
        return len(rows)

    def sequences_settle(self, thread_keys: set[str]) -> None:
        """Existing threads that received messages: their sequence counter moves past them."""
        highest = (
            models.Message.objects.filter(thread_id__in=thread_keys)
            .values("thread_id")
            .annotate(top=Max("sequence"))
            .values_list("thread_id", "top")
        )
        for key, top in highest:
            models.Thread.objects.filter(pk=key, last_sequence__lt=top).update(last_sequence=top)


def _holds(storage: Any, name: str, sha256: str) -> bool:
    """Whether the storage has a file `name` with these bytes. A document names files, so one is used
    only when its bytes are the attachment's: never another resource's file under a forged name."""
    try:
        if not storage.exists(name):
            return False
        digest = hashlib.sha256()
        with storage.open(name, "rb") as handle:
            for block in iter(lambda: handle.read(1024 * 1024), b""):
                digest.update(block)
    except Exception as exc:  # an unreachable storage: the archive's copy, if any, is used instead
        logs.failure(
            logger, "memproc: could not read attachment file %s", name, exc=exc, level=logging.WARNING
        )
        return False
    return digest.hexdigest() == sha256


def _absent(rows: list[Any]) -> list[Any]:
    """The rows (of one model) whose id is not stored yet."""
    if not rows:
        return []
    model = type(rows[0])
    stored = set(model.objects.filter(pk__in=[row.pk for row in rows]).values_list("pk", flat=True))
    return [row for row in rows if row.pk not in stored]


def _embeddings_enqueue(messages: list[models.Message], threads: list[models.Thread]) -> int:
    """One `memproc.embed_messages` job per agent (its recall embedder, else the setting's) and
    EMBED_BATCH messages; sent after commit."""
    agent_of = {t.pk: t.agent_id for t in threads}
    wanted = sorted(
        (agent_of.get(m.thread_id, ""), m.pk)
        for m in messages
        if m.role in EMBEDDABLE_ROLES and m.text.strip()
    )
    jobs = 0
    for agent_id, group in groupby(wanted, key=lambda pair: pair[0]):
        ids = [message_id for _, message_id in group]
        for start in range(0, len(ids), EMBED_BATCH):
            background.enqueue(
                "memproc.embed_messages",
                kwargs={"message_ids": ids[start : start + EMBED_BATCH], "agent_id": agent_id or None},
            )
            jobs += 1
    return jobs


class _Users:
    """Username -> user: one query per distinct name; names not found are reported."""

    def __init__(self, report: ImportReport) -> None:
        self.report = report
        self.cache: dict[str, Any] = {}

    def __call__(self, username: str | None) -> Any:
        if not username:
            return None
        if username not in self.cache:
            User = get_user_model()
            user = User._default_manager.filter(**{User.USERNAME_FIELD: username}).first()
            if user is None:
                self.report.unknown_users.append(username)
            self.cache[username] = user
        return self.cache[username]
