"""memproc's stored data: resources, threads, messages, working memory, embeddings, tripwires, files."""

from __future__ import annotations

import uuid
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Case, Q, Value, When
from django.db.models.fields.json import KT
from django.db.models.lookups import In
from django.utils import timezone
from django.utils.text import get_valid_filename
from django.utils.translation import gettext_lazy as _

from memproc.exceptions import ValidationError
from memproc.fields import VectorField
from memproc.storage import attachment_storage


class Resource(models.Model):
    """The owner of threads and resource-scoped working memory: a user, an account, a tenant."""

    id = models.CharField(primary_key=True, max_length=255)
    working_memory = models.TextField(blank=True, default="")
    working_memory_version = models.PositiveIntegerField(default=0, editable=False)
    metadata = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return self.id


# A thread id names a thread within its resource (DESIGN §5): two resources may each have a thread
# "support-1". In the database a thread is named by its key, the resource id and the thread id joined
# by a character no resource id may hold, so the key is unique, derived without a query, and says
# whose thread it is. Python values and the API speak (resource id, thread id); columns hold keys.
THREAD_KEY_SEPARATOR = "\x1f"
THREAD_KEY_MAX_LENGTH = 511


def thread_key(resource_id: str, thread_id: str) -> str:
    """The stored key of `resource_id`'s thread `thread_id` ("" for no thread)."""
    if not thread_id:
        return ""
    if THREAD_KEY_SEPARATOR in resource_id:
        raise ValidationError("a resource id cannot hold control characters")
    return f"{resource_id}{THREAD_KEY_SEPARATOR}{thread_id}"


def split_thread_key(key: str) -> tuple[str, str]:
    """(resource id, thread id) of a stored key; a key from before keys existed is its own id."""
    resource_id, separator, thread_id = key.partition(THREAD_KEY_SEPARATOR)
    return (resource_id, thread_id) if separator else ("", key)


def public_thread_id(key: str) -> str:
    """The thread id a caller knows, of a stored key."""
    return split_thread_key(key)[1]


class Thread(models.Model):
    # `id`, the primary key, is the thread's key (see `thread_key`): derived from the resource id and
    # `public_id`, the thread id callers use, so a turn names its thread's rows without a query.
    id = models.CharField(primary_key=True, max_length=THREAD_KEY_MAX_LENGTH, editable=False)
    public_id = models.CharField(_("thread id"), max_length=255)
    resource = models.ForeignKey(Resource, on_delete=models.CASCADE, related_name="threads")
    title = models.CharField(max_length=255, blank=True, default="")
    agent_id = models.CharField(max_length=255, blank=True, default="", db_index=True)
    metadata = models.JSONField(default=dict, blank=True)
    working_memory = models.TextField(blank=True, default="")
    working_memory_version = models.PositiveIntegerField(default=0, editable=False)
    # The highest `Message.sequence` handed out; bumped with an UPDATE that locks the row.
    last_sequence = models.BigIntegerField(default=0, editable=False)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    updated_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-updated_at"]
        constraints = [
            # Leading with the thread id, its index also serves a lookup by thread id alone (staff
            # and Python callers who name no resource).
            models.UniqueConstraint(fields=["public_id", "resource"], name="memproc_thread_public_id"),
        ]
        indexes = [
            models.Index(fields=["resource", "-updated_at"], name="memproc_thread_res_upd"),
            models.Index(fields=["created_at"], name="memproc_thread_created"),
        ]

    def __str__(self) -> str:
        return self.title or self.public_id

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self.public_id:
            raise ValueError("a thread needs its public_id (the id callers use)")
        self.id = thread_key(self.resource_id, self.public_id)
        super().save(*args, **kwargs)


# USER_LINK: memproc's links to users (who edited, who reviewed) carry no database constraint and are
# cleared by memproc.signals' receiver when a user is deleted, not by Django's delete collector: a site
# may keep memproc's tables in a database of their own (a router), apart from its users, and neither
# a constraint nor the collector can reach across databases.

# Quarantine statuses that keep a message out of history and recall ("cleared" lets it back in).
QUARANTINE_ACTIVE = ("flagged", "confirmed")


class Message(models.Model):
    class Role(models.TextChoices):
        SYSTEM = "system", _("System")
        USER = "user", _("User")
        ASSISTANT = "assistant", _("Assistant")
        TOOL = "tool", _("Tool")

    id = models.CharField(primary_key=True, max_length=255)
    # No index of its own: the unique (thread, sequence) constraint's index serves every lookup by
    # thread, in order. A second one (with PostgreSQL's `_like` twin) tempted the planner into
    # scanning a whole thread and sorting it whenever statistics lagged behind a bulk load.
    thread = models.ForeignKey(Thread, on_delete=models.CASCADE, related_name="messages", db_index=False)
    resource_id = models.CharField(max_length=255)
    role = models.CharField(max_length=16, choices=Role.choices)
    content = models.JSONField(default=dict)
    text = models.TextField(blank=True, default="")
    token_count = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    sequence = models.BigIntegerField()
    # Derived by the database from `content["metadata"]["quarantine"]["status"]`, which a guardrail
    # writes with the message (memproc.guardrails): true while the flag is "flagged" or "confirmed",
    # false once an operator clears it. History and recall skip quarantined messages in their SQL.
    quarantined = models.GeneratedField(
        expression=Case(
            When(In(KT("content__metadata__quarantine__status"), QUARANTINE_ACTIVE), then=Value(True)),
            default=Value(False),
        ),
        output_field=models.BooleanField(),
        db_persist=True,
    )

    class Meta:
        ordering = ["thread", "sequence"]
        constraints = [
            models.UniqueConstraint(fields=["thread", "sequence"], name="memproc_message_thread_seq"),
        ]
        indexes = [
            models.Index(fields=["resource_id", "created_at"], name="memproc_msg_res_created"),
            models.Index(fields=["created_at"], name="memproc_msg_created"),
            # The admin's queue of flagged messages: a partial index holds only them.
            models.Index(
                fields=["-created_at"], condition=Q(quarantined=True), name="memproc_msg_quarantined"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.role}: {self.text[:60]}"


class WorkingMemoryRevision(models.Model):
    class Scope(models.TextChoices):
        THREAD = "thread", _("Thread")
        RESOURCE = "resource", _("Resource")

    class Source(models.TextChoices):
        MODEL = "model", _("Model tool")
        API = "api", _("API")
        ADMIN = "admin", _("Admin")
        CODE = "code", _("Code")

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    scope = models.CharField(max_length=16, choices=Scope.choices)
    key = models.CharField(
        max_length=THREAD_KEY_MAX_LENGTH,
        help_text=_("The thread's key (see `thread_key`) or the resource id."),
    )
    old = models.TextField(blank=True, default="")
    new = models.TextField(blank=True, default="")
    version = models.PositiveIntegerField()
    source = models.CharField(max_length=16, choices=Source.choices)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,  # see USER_LINK
        db_constraint=False,
        related_name="memproc_working_memory_revisions",
    )
    thread_id = models.CharField(max_length=THREAD_KEY_MAX_LENGTH, blank=True, default="")  # a key
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["scope", "key", "-created_at"], name="memproc_wmrev_key")]

    def __str__(self) -> str:
        key = public_thread_id(self.key) if self.scope == self.Scope.THREAD else self.key
        return f"{self.scope} {key} v{self.version}"


class MessageEmbedding(models.Model):
    id = models.BigAutoField(primary_key=True)
    message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="embeddings")
    # Denormalised so a scoped search filters this table alone: the thread id callers use, so a thread
    # scope always filters resource_id too.
    thread_id = models.CharField(max_length=255)
    resource_id = models.CharField(max_length=255)
    chunk = models.PositiveIntegerField(default=0)
    model = models.CharField(max_length=255, help_text=_("The embedder id."))
    dimensions = models.PositiveIntegerField()
    content_hash = models.CharField(max_length=64)
    vector = VectorField()
    created_at = models.DateTimeField(default=timezone.now)
    # PostgreSQL: in the embedder's partial HNSW index. The pgvector store writes False (no graph
    # insertion on the turn) and the background index merge marks them; searches scan the unmarked
    # tail exactly. Other writers get True: their rows enter the graph on insert, as they always did.
    indexed = models.BooleanField(default=True, db_default=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["message", "model", "chunk"], name="memproc_emb_msg_model_chunk"),
        ]
        indexes = [
            models.Index(fields=["model", "resource_id"], name="memproc_emb_model_res"),
            models.Index(fields=["model", "thread_id"], name="memproc_emb_model_thread"),
            models.Index(fields=["model", "content_hash"], name="memproc_emb_model_hash"),
        ]

    def __str__(self) -> str:
        return f"{self.message_id}#{self.chunk} ({self.model})"


class TripwireLog(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending", _("Pending")
        CONFIRMED = "confirmed", _("Confirmed")
        FALSE_POSITIVE = "false_positive", _("False positive")

    class Phase(models.TextChoices):
        INPUT = "input", _("Input")
        INPUT_STEP = "input_step", _("Input step")
        OUTPUT_STEP = "output_step", _("Output step")
        TOOL_RESULT = "tool_result", _("Tool result")
        OUTPUT = "output", _("Output")
        STREAM = "stream", _("Stream")

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    agent_id = models.CharField(max_length=255, blank=True, default="")
    processor_id = models.CharField(max_length=255)
    phase = models.CharField(max_length=16, choices=Phase.choices)
    reason = models.TextField()
    retry = models.BooleanField(default=False)
    metadata = models.JSONField(default=dict, blank=True)
    # Plain ids, not FKs: a blocked first turn has no stored thread, and a log outlives deletions.
    thread_id = models.CharField(max_length=255, blank=True, default="")  # beside resource_id
    resource_id = models.CharField(max_length=255, blank=True, default="")
    content = models.JSONField(null=True, blank=True, help_text=_("The blocked messages, if stored."))
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    reviewed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,  # see USER_LINK
        db_constraint=False,
        related_name="memproc_tripwire_reviews",
    )
    reviewed_at = models.DateTimeField(null=True, blank=True)
    note = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["status", "-created_at"], name="memproc_trip_status"),
            models.Index(fields=["agent_id", "-created_at"], name="memproc_trip_agent"),
            models.Index(fields=["processor_id", "-created_at"], name="memproc_trip_proc"),
            models.Index(fields=["resource_id", "-created_at"], name="memproc_trip_res"),
            models.Index(fields=["thread_id"], name="memproc_trip_thread"),
        ]

    def __str__(self) -> str:
        return f"{self.processor_id} ({self.phase}): {self.reason[:60]}"


class TurnRecord(models.Model):
    """One turn: how it ended, what it cost, and why the model saw what it saw (the manifest).

    The manifest holds ids and numbers, never message text: history ids, recalled ids with their
    score and source thread, the working memory's scope, key and version, token counts around the
    limiter, each processor hook's duration. Plain ids, not FKs, as for tripwire logs: a record
    outlives the messages it names and exists for turns that saved nothing.
    """

    class Status(models.TextChoices):
        COMPLETED = "completed", _("Completed")
        BLOCKED = "blocked", _("Blocked")
        FAILED = "failed", _("Failed")

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    agent_id = models.CharField(max_length=255, blank=True, default="")
    thread_id = models.CharField(max_length=255, blank=True, default="")  # beside resource_id
    resource_id = models.CharField(max_length=255, blank=True, default="")
    status = models.CharField(max_length=16, choices=Status.choices)
    model = models.CharField(max_length=255, blank=True, default="")
    steps = models.PositiveIntegerField(default=0)
    usage = models.JSONField(default=dict, blank=True)
    manifest = models.JSONField(default=dict, blank=True)
    # The reply this turn saved (completed turns), so the transcript can show the manifest under it.
    message_ids = models.JSONField(default=list, blank=True)
    tripwire = models.ForeignKey(
        TripwireLog, null=True, blank=True, on_delete=models.SET_NULL, related_name="turn_records"
    )
    error = models.CharField(
        max_length=255, blank=True, default="", help_text=_("Error class of a failed turn.")
    )
    started_at = models.DateTimeField(default=timezone.now)
    duration_ms = models.FloatField(default=0.0)

    class Meta:
        ordering = ["-started_at"]
        indexes = [
            models.Index(fields=["thread_id", "started_at"], name="memproc_turn_thread"),
            models.Index(fields=["agent_id", "-started_at"], name="memproc_turn_agent"),
            models.Index(fields=["status", "-started_at"], name="memproc_turn_status"),
            models.Index(fields=["-started_at"], name="memproc_turn_started"),
        ]

    def __str__(self) -> str:
        return f"{self.agent_id} turn {self.status} ({self.duration_ms:.0f} ms)"


def attachment_upload_to(instance: Attachment, filename: str) -> str:
    """Content-addressed path; the resource id is a client-chosen string, so it is made path-safe."""
    resource = get_valid_filename(instance.resource_id or "_").replace("..", "_") or "_"
    return f"memproc/{resource}/{instance.sha256[:2]}/{instance.sha256}/{get_valid_filename(filename)}"


class Attachment(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    resource_id = models.CharField(max_length=255)
    message = models.ForeignKey(
        Message, null=True, blank=True, on_delete=models.SET_NULL, related_name="attachments"
    )
    file = models.FileField(upload_to=attachment_upload_to, storage=attachment_storage, max_length=500)
    name = models.CharField(max_length=255)
    content_type = models.CharField(max_length=255)
    size = models.PositiveBigIntegerField()
    sha256 = models.CharField(max_length=64)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["resource_id", "sha256"], name="memproc_attachment_res_sha", condition=~Q(sha256="")
            ),
        ]

    def __str__(self) -> str:
        return self.name


class OutboxJob(models.Model):
    """A background job written in the transaction of the work that needs it (the outbox).

    It is sent after commit and deleted once delivered (Celery accepted it, or inline mode ran it), so
    a broker that is down never fails a committed turn: the row stays, and `memproc_outbox` or the
    `memproc.outbox_dispatch` beat task sends it again later. Every task is idempotent, so a job sent
    twice (delivered, but the delete was lost) does no harm.
    """

    id = models.BigAutoField(primary_key=True)
    task = models.CharField(max_length=255, help_text=_("The task's wire name."))
    kwargs = models.JSONField(default=dict, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    last_error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["next_attempt_at"], name="memproc_outbox_due")]

    def __str__(self) -> str:
        return f"{self.task} #{self.pk} ({self.attempts} attempts)"


class IdempotencyRecord(models.Model):
    """The first answer to a request sent with an `Idempotency-Key`, replayed for its repeats.

    `scope` keeps callers apart (the caller and the endpoint), so two users' keys never meet;
    `request_hash` tells a repeat from a different body sent with the same key (422). The kept answer
    holds the user's messages: `resource_id` and `thread_id` (the thread id, within its resource) say
    whose they are, so purging a resource or deleting a thread deletes it too. `owner_*` name the
    process running a claim, so a repeat can tell that it died (`memproc.api.claim_owner`).
    """

    class State(models.TextChoices):
        RUNNING = "running", _("Running")
        DONE = "done", _("Done")

    id = models.BigAutoField(primary_key=True)
    scope = models.CharField(max_length=255)
    key = models.CharField(max_length=255)
    request_hash = models.CharField(max_length=64)
    state = models.CharField(max_length=16, choices=State.choices, default=State.RUNNING)
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    response = models.JSONField(null=True, blank=True)
    resource_id = models.CharField(max_length=255, blank=True, default="")
    thread_id = models.CharField(max_length=255, blank=True, default="")
    owner_host = models.CharField(max_length=255, blank=True, default="")
    owner_pid = models.PositiveIntegerField(null=True, blank=True)
    owner_started = models.BigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(db_index=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["scope", "key"], name="memproc_idem_scope_key"),
        ]
        indexes = [models.Index(fields=["resource_id", "thread_id"], name="memproc_idem_resource")]

    def __str__(self) -> str:
        return f"{self.scope} {self.key} ({self.state})"


class ThreadSummary(models.Model):
    """The running summary of a long thread (`Memory(compaction=...)`): what the messages up to
    `covered_sequence` said, folded in by the compaction job. It enters the prompt as one system
    message before history, and the messages it covers are not loaded as history again (they stay
    stored, and in recall). `version` is bumped by every change (compare-and-swap); a compaction job
    holds the thread with `claim_token` until `claimed_until`, so one job folds a thread at a time.
    `counted_through`/`counted_tokens`: the uncovered messages through that sequence hold that many
    tokens (a job counted them and found too few to fold)."""

    thread = models.OneToOneField(Thread, primary_key=True, on_delete=models.CASCADE, related_name="summary")
    text = models.TextField(blank=True, default="")
    covered_sequence = models.BigIntegerField(
        default=0, help_text=_("Messages up to this sequence are folded into the summary.")
    )
    token_count = models.PositiveIntegerField(default=0)
    # A job that found too little to fold notes what it counted, so turns estimate the rest only.
    counted_through = models.BigIntegerField(default=0, editable=False)
    counted_tokens = models.PositiveIntegerField(default=0, editable=False)
    version = models.PositiveIntegerField(default=0, editable=False)
    claim_token = models.UUIDField(null=True, blank=True, editable=False)
    claimed_until = models.DateTimeField(null=True, blank=True, editable=False)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-updated_at"]
        verbose_name_plural = _("thread summaries")

    def __str__(self) -> str:
        thread = public_thread_id(self.thread_id)
        return f"Summary of {thread} through #{self.covered_sequence} (v{self.version})"


class SummaryRevision(models.Model):
    """Every change of a thread summary: a fold by the compaction job (the messages after
    `previous_sequence` through `covered_sequence`, the summarizer, its cost) or an edit."""

    class Source(models.TextChoices):
        COMPACTION = "compaction", _("Compaction")
        ADMIN = "admin", _("Admin")
        CODE = "code", _("Code")

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    thread = models.ForeignKey(Thread, on_delete=models.CASCADE, related_name="summary_revisions")
    version = models.PositiveIntegerField()
    text = models.TextField(blank=True, default="")
    previous_sequence = models.BigIntegerField(default=0)
    covered_sequence = models.BigIntegerField(default=0)
    token_count = models.PositiveIntegerField(default=0)
    folded_messages = models.PositiveIntegerField(default=0)
    folded_tokens = models.PositiveIntegerField(default=0)
    source = models.CharField(max_length=16, choices=Source.choices)
    summarizer = models.CharField(max_length=255, blank=True, default="")
    duration_ms = models.FloatField(default=0.0)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,  # see USER_LINK
        db_constraint=False,
        related_name="memproc_summary_revisions",
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["thread", "version"], name="memproc_sumrev_thread_version"),
        ]

    def __str__(self) -> str:
        return f"{public_thread_id(self.thread_id)} summary v{self.version}"
