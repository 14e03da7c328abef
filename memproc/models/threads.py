"""Resources, their threads (and the thread key that names one), and the messages of a thread."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db import models
from django.db.models import Case, Q, Value, When
from django.db.models.fields.json import KT
from django.db.models.lookups import In
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from memproc.exceptions import ValidationError


class Resource(models.Model):
    """The owner of threads and resource-scoped working memory: a user, an account, a tenant."""

    id = models.CharField(primary_key=True, max_length=255)
    working_memory = models.TextField(blank=True, default="")
    working_memory_version = models.PositiveIntegerField(default=0, editable=False)
    metadata = models.JSONField(default=dict, blank=True)
    # Names of working-memory fields the user asserted in the memory view: the model's update tool
    # keeps their values (memproc.processors.working_memory_fields).
    # A database default too, as for every column added after the first release: rows that raw SQL or
    # COPY write without it (a site's own loader, the benchmarks) get [].
    pinned_fields = models.JSONField(
        default=list, db_default=Value([], output_field=models.JSONField()), blank=True
    )
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


def message_key(resource_id: str, message_id: str) -> str:
    """The stored key of `resource_id`'s message `message_id`. A message id names a message within
    its resource, as a thread id names a thread: another user's ids can neither clash with the
    caller's nor be probed by choosing them (a stored id in another resource is simply not there)."""
    if THREAD_KEY_SEPARATOR in resource_id:
        raise ValidationError("a resource id cannot hold control characters")
    return f"{resource_id}{THREAD_KEY_SEPARATOR}{message_id}"


def message_keys(resource_id: str, message_ids: Iterable[str]) -> list[str]:
    return [message_key(resource_id, message_id) for message_id in message_ids]


def public_message_id(key: str) -> str:
    """The message id a caller knows, of a stored key."""
    return key.partition(THREAD_KEY_SEPARATOR)[2] or key


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
    # Set while the thread is archived: left out of the API's thread list by default and out of other
    # threads' semantic recall unless the agent asks for it; its own turns still run and recall.
    archived_at = models.DateTimeField(null=True, blank=True, editable=False)

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
            # Recall's look-up of a resource's archived threads holds only them.
            models.Index(
                fields=["resource"],
                condition=Q(archived_at__isnull=False),
                name="memproc_thread_archived",
            ),
        ]

    def __str__(self) -> str:
        return self.title or self.public_id

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self.public_id:
            raise ValueError("a thread needs its public_id (the id callers use)")
        self.id = thread_key(self.resource_id, self.public_id)
        super().save(*args, **kwargs)


# Quarantine statuses that keep a message out of history and recall ("cleared" lets it back in).
QUARANTINE_ACTIVE = ("flagged", "confirmed")


class Message(models.Model):
    class Role(models.TextChoices):
        SYSTEM = "system", _("System")
        USER = "user", _("User")
        ASSISTANT = "assistant", _("Assistant")
        TOOL = "tool", _("Tool")

    # `id`, the primary key, is the message's key (see `message_key`): the resource id and
    # `public_id`, the message id callers use, which names a message within its resource.
    id = models.CharField(primary_key=True, max_length=THREAD_KEY_MAX_LENGTH, editable=False)
    public_id = models.CharField(_("message id"), max_length=255)
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
    # The user asked (memory view) that semantic recall never bring this message back; history still
    # shows it. Recall skips it in its SQL, and it holds no embeddings while excluded.
    recall_excluded = models.BooleanField(default=False, db_default=False, editable=False)

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
            # The memory view's list of a resource's excluded messages: a partial index holds only them.
            models.Index(
                fields=["resource_id", "-created_at"],
                condition=Q(recall_excluded=True),
                name="memproc_msg_recall_excluded",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.role}: {self.text[:60]}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self.public_id:
            raise ValueError("a message needs its public_id (the id callers use)")
        self.id = message_key(self.resource_id, self.public_id)
        super().save(*args, **kwargs)
