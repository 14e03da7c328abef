"""The approval queue: tool calls that wait for a decision, shown only to staff who may decide them
(memproc.services.approvals.may_decide), approved or rejected through the service. The turns resume
in the background (`approve_later`): on a Celery worker with BACKGROUND="celery", so approving fifty
calls does not wait for fifty model calls; inline, right after the decision commits."""

from __future__ import annotations

import logging
from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from memproc import models
from memproc.admin.cells import clipped, list_time, stacked
from memproc.admin.common import ADMIN_MEDIA_CSS, ReadOnlyAdmin, UserLinksMixin, one_line, pretty_json
from memproc.conf import settings as memproc_settings
from memproc.exceptions import PendingCallConflict, PendingCallNotFound
from memproc.services import approvals

logger = logging.getLogger(__name__)
State = models.PendingToolCall.State
ADMIN_REJECTION = "Rejected in the admin"


@admin.register(models.PendingToolCall)
class PendingToolCallAdmin(UserLinksMixin, ReadOnlyAdmin):
    # Three columns that fit beside the navigation and the filters at 1280 px: when it came and when
    # it expires, the call (tool and arguments), and where (agent, thread, resource).
    list_display = ("waiting", "call", "where")
    list_filter = ("state", "agent_id", "tool_name")
    user_links = ("decided_by",)
    search_fields = ("=tool_name", "=agent_id", "=thread_id", "=resource_id")
    search_help_text = _("A tool, agent, thread or resource id (exact).")
    list_per_page = 50
    actions = ("approve_selected", "reject_selected")
    fields = (
        "tool_name",
        "arguments_json",
        "model_text",
        "state",
        "agent_id",
        "thread_id",
        "resource_id",
        "created_at",
        "expires_at",
        "decided_by",
        "decided_at",
        "reason",
        "edited_json",
        "result_json",
    )
    readonly_fields = fields

    class Media:
        css = ADMIN_MEDIA_CSS

    # --- who sees what: only the calls the user may decide -----------------------------------------

    def get_queryset(self, request: HttpRequest) -> QuerySet[models.PendingToolCall]:
        decidable = approvals.pending_decidable(user=request.user, states=None)
        return super().get_queryset(request).filter(pk__in=decidable.values("pk"))

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        user = request.user
        if not (user.is_active and user.is_staff):
            return False
        if obj is not None:
            return approvals.may_decide(user, obj)
        return (
            user.has_perm("memproc.change_pendingtoolcall")
            or approvals.pending_decidable(user=user, states=None).exists()
        )

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self.has_view_permission(request)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_decide_permission(self, request: HttpRequest) -> bool:
        return self.has_view_permission(request)

    # --- columns ---------------------------------------------------------------------------------

    @admin.display(description=_("Waiting since / expires"), ordering="created_at")
    def waiting(self, obj: models.PendingToolCall) -> Any:
        state = obj.get_state_display() if obj.state != State.PENDING else ""
        return stacked(list_time(obj.created_at), list_time(obj.expires_at) if obj.expires_at else "", state)

    @admin.display(description=_("Call"), ordering="tool_name")
    def call(self, obj: models.PendingToolCall) -> Any:
        return stacked(
            clipped(obj.tool_name),
            clipped(one_line(obj.effective_arguments, limit=200), quiet=True),
        )

    @admin.display(description=_("Where"), ordering="agent_id")
    def where(self, obj: models.PendingToolCall) -> Any:
        return stacked(
            clipped(obj.agent_id),
            clipped(obj.thread_id or "—", quiet=True),
            clipped(obj.resource_id, quiet=True),
        )

    @admin.display(description=_("Arguments"))
    def arguments_json(self, obj: models.PendingToolCall) -> Any:
        return _json_block(obj.arguments)

    @admin.display(description=_("Edited arguments"))
    def edited_json(self, obj: models.PendingToolCall) -> Any:
        return "—" if obj.edited_arguments is None else _json_block(obj.edited_arguments)

    @admin.display(description=_("Result"))
    def result_json(self, obj: models.PendingToolCall) -> Any:
        return "—" if obj.result is None else _json_block(obj.result)

    @admin.display(description=_("The model wrote"))
    def model_text(self, obj: models.PendingToolCall) -> str:
        for message in reversed(obj.turn.get("responses", [])):
            parts = message.get("content", {}).get("parts", [])
            text = "".join(p.get("text", "") for p in parts if p.get("type") == "text")
            if message.get("role") == "assistant" and text:
                return text
        return "—"

    # --- decisions -------------------------------------------------------------------------------

    @admin.action(description=_("Approve selected calls (the tools run)"), permissions=["decide"])
    def approve_selected(self, request: HttpRequest, queryset: QuerySet[models.PendingToolCall]) -> None:
        self._decide(
            request, queryset, lambda pk: approvals.approve_later(pk, actor=request.user), _("approved")
        )

    @admin.action(description=_("Reject selected calls (the tools do not run)"), permissions=["decide"])
    def reject_selected(self, request: HttpRequest, queryset: QuerySet[models.PendingToolCall]) -> None:
        self._decide(
            request,
            queryset,
            lambda pk: approvals.reject_later(pk, actor=request.user, reason=str(ADMIN_REJECTION)),
            _("rejected"),
        )

    def _decide(
        self, request: HttpRequest, queryset: QuerySet[models.PendingToolCall], decide: Any, done: Any
    ) -> None:
        decided, skipped = 0, 0
        for pk in queryset.filter(state=State.PENDING).values_list("pk", flat=True):
            try:
                decide(pk)
                decided += 1
            except (PendingCallConflict, PendingCallNotFound):
                skipped += 1
        if decided:
            later = memproc_settings.BACKGROUND == "celery"
            where = _("will resume on a Celery worker") if later else _("resumed")
            self.message_user(
                request,
                ngettext(
                    "%(count)d call %(done)s; its turn %(where)s.",
                    "%(count)d calls %(done)s; their turns %(where)s.",
                    decided,
                )
                % {"count": decided, "done": done, "where": where},
                messages.SUCCESS,
            )
        if skipped or not decided:
            self.message_user(request, _("Calls no longer pending were left as they are."), messages.WARNING)


def _json_block(value: Any) -> Any:
    text, cut = pretty_json(value)
    return format_html('<pre class="memproc-pre">{}{}</pre>', text, "\n…" if cut else "")
