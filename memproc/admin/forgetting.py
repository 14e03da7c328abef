"""Forget receipts in the admin: what each forget removed, its proof, and held working memory to decide."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext_lazy as _

from memproc import models
from memproc.admin.cells import clipped, list_time, stacked, thread_lines
from memproc.admin.common import ADMIN_MEDIA_CSS, ReadOnlyAdmin, UserLinksMixin, admin_url
from memproc.models import thread_key
from memproc.services.forget import held_decide
from memproc.services.forget.verify import verify


@admin.register(models.ForgetReceipt)
class ForgetReceiptAdmin(UserLinksMixin, ReadOnlyAdmin):
    list_display = ("forgotten", "what", "what_went")
    list_display_links = None
    list_filter = ("status", "scope")
    search_fields = ("resource_id", "thread_id")
    fields = (
        "resource_id",
        "scope",
        "thread_id",
        "cascade",
        "status",
        "counts",
        "held",
        "actor",
        "created_at",
        "verified_at",
    )
    readonly_fields = fields
    user_links = ("actor",)
    actions = ("verify_resources", "take_back_held", "keep_current")

    class Media:
        css = ADMIN_MEDIA_CSS

    @admin.display(description=_("Forgotten"), ordering="created_at")
    def forgotten(self, receipt: models.ForgetReceipt) -> SafeString:
        verified = receipt.verified_at
        return stacked(
            format_html(
                '<a href="{}">{}</a>', admin_url("forgetreceipt", receipt.pk), list_time(receipt.created_at)
            ),
            clipped(_("by %(user)s") % {"user": receipt.actor}, quiet=True) if receipt.actor else None,
            clipped(_("verified %(when)s") % {"when": list_time(verified)}, quiet=True) if verified else None,
        )

    @admin.display(description=_("What"), ordering="resource_id")
    def what(self, receipt: models.ForgetReceipt) -> SafeString:
        if receipt.scope == models.ForgetReceipt.Scope.THREAD:
            target = thread_lines(thread_key(receipt.resource_id, receipt.thread_id), linked=False)
        else:
            target = clipped(receipt.resource_id)
        status = format_html(
            '<span class="memproc-badge memproc-status-{}">{}</span>',
            receipt.status,
            receipt.get_status_display(),
        )
        return stacked(clipped(receipt.get_scope_display()), target, status)

    @admin.display(description=_("What went"))
    def what_went(self, receipt: models.ForgetReceipt) -> SafeString | str:
        """One line, cut where the column ends; every count in its title."""
        went = [f"{v} {k.replace('_', ' ')}" for k, v in sorted(receipt.counts.items()) if v]
        return clipped(", ".join(went)) if went else "—"

    def has_decide_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("memproc.change_forgetreceipt")

    @admin.action(description=_("Verify: nothing forgotten is still stored"), permissions=["view"])
    def verify_resources(self, request: HttpRequest, queryset: QuerySet[models.ForgetReceipt]) -> None:
        for resource_id in sorted(set(queryset.values_list("resource_id", flat=True))):
            findings = verify(resource_id=resource_id)
            if findings:
                for finding in findings[:20]:
                    self.message_user(request, str(finding), messages.ERROR)
            else:
                self.message_user(request, _("%s: verified.") % resource_id, messages.SUCCESS)

    @admin.action(
        description=_("Held working memory: go back to before the forgotten turn"), permissions=["decide"]
    )
    def take_back_held(self, request: HttpRequest, queryset: QuerySet[models.ForgetReceipt]) -> None:
        self._decide(request, queryset, keep_current=False)

    @admin.action(
        description=_("Held working memory: keep the current value (corrected by hand)"),
        permissions=["decide"],
    )
    def keep_current(self, request: HttpRequest, queryset: QuerySet[models.ForgetReceipt]) -> None:
        self._decide(request, queryset, keep_current=True)

    def _decide(self, request: HttpRequest, queryset: QuerySet[Any], *, keep_current: bool) -> None:
        for receipt in queryset.filter(status=models.ForgetReceipt.Status.REVIEW):
            if held_decide(receipt=receipt, keep_current=keep_current, actor=request.user):
                self.message_user(request, _("%s: decided.") % receipt, messages.SUCCESS)
            else:
                self.message_user(
                    request, _("%s changed meanwhile; decide again.") % receipt, messages.WARNING
                )
