"""Archiving threads in the admin: a list filter and the archive / unarchive actions, which need
`memproc.change_thread` as editing a thread does, and call the services."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from memproc import models
from memproc.db import memproc_db
from memproc.services.threads import thread_archive, thread_unarchive


class ArchivedFilter(admin.SimpleListFilter):
    title = _("archived")
    parameter_name = "archived"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [("yes", _("Archived")), ("no", _("Not archived"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() in ("yes", "no"):
            return queryset.filter(archived_at__isnull=self.value() == "no")
        return queryset


class ThreadArchiveActionsMixin:
    """The thread admin's archive and unarchive actions."""

    @admin.action(description=_("Archive selected threads"), permissions=["change"])
    def archive_threads(self, request: HttpRequest, queryset: QuerySet[models.Thread]) -> None:
        count = self._archive_each(queryset.filter(archived_at__isnull=True), thread_archive)
        message = ngettext("%(count)d thread archived.", "%(count)d threads archived.", count)
        self.message_user(request, message % {"count": count})  # type: ignore[attr-defined]

    @admin.action(description=_("Unarchive selected threads"), permissions=["change"])
    def unarchive_threads(self, request: HttpRequest, queryset: QuerySet[models.Thread]) -> None:
        count = self._archive_each(queryset.filter(archived_at__isnull=False), thread_unarchive)
        message = ngettext("%(count)d thread unarchived.", "%(count)d threads unarchived.", count)
        self.message_user(request, message % {"count": count})  # type: ignore[attr-defined]

    @staticmethod
    def _archive_each(queryset: QuerySet[models.Thread], write: Any) -> int:
        with transaction.atomic(using=memproc_db()):
            threads = list(queryset.order_by())
            for thread in threads:
                write(thread=thread)
        return len(threads)
