"""Tool calls that wait for a person: a turn suspended at an approval-gated (or client-side) tool."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _


class PendingToolCall(models.Model):
    """One tool call the model made that waits for a decision, and the suspended turn around it.

    `state` moves once from pending to approved, rejected or expired (a conditional UPDATE, so of
    concurrent deciders one wins); an approved call whose turn resumed and saved is done. A rejected
    or expired call's turn resumes too, with a tool result saying so; `completed_at` marks the
    resumed turn saved (or suspended again at a later call, which is a new row).

    `turn` holds what the resume needs, as JSON: the turn's input and its responses so far as stored
    message content, the calls of the suspended step and their results so far, the step and usage.
    Nothing of the turn is in the thread's memory until it completes.
    """

    class State(models.TextChoices):
        PENDING = "pending", _("Pending")
        APPROVED = "approved", _("Approved")
        REJECTED = "rejected", _("Rejected")
        EXPIRED = "expired", _("Expired")
        DONE = "done", _("Done")

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    agent_id = models.CharField(max_length=255)
    thread_id = models.CharField(max_length=255, blank=True, default="")  # public id; "" without memory
    resource_id = models.CharField(max_length=255, blank=True, default="", db_index=True)
    tool_name = models.CharField(max_length=255)
    tool_call_id = models.CharField(max_length=255)
    arguments = models.JSONField(default=dict, blank=True)
    # "approval": a person decides; "client": the caller answers with the tool's result.
    kind = models.CharField(max_length=16, default="approval", editable=False)
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    # The Django permission a decider needs ("app_label.codename"); "" when the tool decides with
    # a callable of its own (read from the tool when a decision is asked for).
    permission = models.CharField(max_length=255, blank=True, default="")
    turn = models.JSONField(default=dict, blank=True, editable=False)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,  # see USER_LINK in memproc.models
        db_constraint=False,
        related_name="memproc_decided_tool_calls",
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    reason = models.TextField(blank=True, default="")
    # The arguments the decider approved instead of the model's (None: the model's, unchanged).
    edited_arguments = models.JSONField(null=True, blank=True)
    # The tool's result once it ran (recorded before the turn goes on, so a resume after a crash
    # does not run it again), or what the model read instead (a rejection).
    result = models.JSONField(null=True, blank=True)
    result_is_error = models.BooleanField(default=False)
    ran_at = models.DateTimeField(null=True, blank=True)
    # Taken by the worker that resumes the turn; a resume stalled past a lease may be taken again.
    claimed_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["state", "expires_at"], name="memproc_pending_state_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.tool_name} ({self.get_state_display()})"

    @property
    def effective_arguments(self) -> dict:
        return self.edited_arguments if self.edited_arguments is not None else dict(self.arguments)
