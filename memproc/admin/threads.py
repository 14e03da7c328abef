"""Resources and threads: lists with annotated counts, the transcript, working memory (messages:
memproc.admin.messages)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from urllib.parse import urlencode

from django import forms
from django.contrib import admin
from django.db import transaction
from django.db.models import Count, IntegerField, OuterRef, Q, QuerySet, Subquery, Value
from django.db.models.functions import Coalesce
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext_lazy as _

from memproc import models
from memproc.admin.cells import clamped, clipped, list_time, stacked
from memproc.admin.common import (
    ADMIN_MEDIA_CSS,
    KeySafePagesMixin,
    ThreadKeyPkMixin,
    admin_link,
    admin_url,
    changelist_url,
)
from memproc.admin.thread_archive import ArchivedFilter, ThreadArchiveActionsMixin
from memproc.admin.transcript import transcript_context
from memproc.admin.working_memory import (
    WorkingMemoryAdminMixin,
    WorkingMemoryForm,
    working_memory_scope_in_use,
)
from memproc.db import memproc_db
from memproc.selectors.threads import pinned_names
from memproc.services.purge import resource_purge
from memproc.services.threads import thread_delete, thread_update


def deletion_summary(objs: Any, counts: dict[Any, int]) -> tuple[list[str], dict[Any, int], set[str], list]:
    """What `ModelAdmin.get_deleted_objects` returns: objects to list, counts, missing perms, protected."""
    return [str(obj) for obj in objs], counts, set(), []


def _count_of(queryset: QuerySet[Any], column: str) -> Coalesce:
    """A correlated COUNT(*) subquery: one index range per row, no GROUP BY over the outer query."""
    counted = queryset.order_by().values(column).annotate(n=Count("*")).values("n")
    return Coalesce(Subquery(counted, output_field=IntegerField()), Value(0))


def threads_for_admin() -> QuerySet[models.Thread]:
    """Threads with their message count, last message time and tripwire count, as subqueries."""
    messages = models.Message.objects.filter(thread_id=OuterRef("pk"))
    # TripwireLog keeps a plain (resource id, thread id) pair (a log outlives its thread), hence a
    # subquery, not a join; the thread id alone may name another resource's thread.
    tripwires = models.TripwireLog.objects.filter(
        thread_id=OuterRef("public_id"), resource_id=OuterRef("resource_id")
    )
    return models.Thread.objects.annotate(
        message_count=_count_of(messages, "thread_id"),
        last_message_at=Subquery(messages.order_by("-sequence").values("created_at")[:1]),
        tripwire_count=_count_of(tripwires, "thread_id"),
    )


def thread_rows(threads: Iterable[models.Thread]) -> Q:
    """Rows that name one of `threads` by (resource id, thread id), as embeddings and logs do."""
    match = Q(pk__in=[])
    for thread in threads:
        match |= Q(thread_id=thread.public_id, resource_id=thread.resource_id)
    return match


class HasTripwiresFilter(admin.SimpleListFilter):
    title = _("tripwires")
    parameter_name = "tripwires"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [("yes", _("Has blocked turns")), ("no", _("None"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "yes":
            return queryset.filter(tripwire_count__gt=0)
        if self.value() == "no":
            return queryset.filter(tripwire_count=0)
        return queryset


METADATA_WIDGET = forms.Textarea(attrs={"rows": 4, "cols": 60, "class": "memproc-mono"})


class ThreadForm(WorkingMemoryForm):
    scope = "thread"

    class Meta:
        model = models.Thread
        fields = ("title", "metadata")
        widgets = {"metadata": METADATA_WIDGET}


class ResourceForm(WorkingMemoryForm):
    scope = "resource"

    class Meta:
        model = models.Resource
        fields = ("metadata",)
        widgets = {"metadata": METADATA_WIDGET}


@admin.register(models.Resource)
class ResourceAdmin(KeySafePagesMixin, WorkingMemoryAdminMixin, admin.ModelAdmin):
    form = ResourceForm
    working_memory_scope = "resource"
    list_display = (
        "resource_id",
        "thread_count",
        "working_memory_preview",
        "working_memory_version",
        "updated",
    )
    search_fields = ("id",)
    list_per_page = 50
    readonly_fields = ("id", "threads_link", "pinned", "created_at", "updated_at", "revisions_link")
    fieldsets = (
        (None, {"fields": ("id", "threads_link", "metadata", "pinned", "created_at", "updated_at")}),
        WorkingMemoryAdminMixin.working_memory_fieldset,
    )

    class Media:
        css = ADMIN_MEDIA_CSS

    @admin.display(description=_("Pinned fields"))
    def pinned(self, obj: models.Resource) -> str:
        """Working-memory fields the user pinned in the memory view: the model's updates keep them."""
        return ", ".join(pinned_names(obj.pinned_fields)) or "—"

    def get_queryset(self, request: HttpRequest) -> QuerySet[models.Resource]:
        threads = models.Thread.objects.filter(resource_id=OuterRef("pk"))
        return super().get_queryset(request).annotate(thread_count=_count_of(threads, "resource_id"))

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # resources appear with their first thread

    def save_model(
        self, request: HttpRequest, obj: models.Resource, form: ResourceForm, change: bool
    ) -> None:
        if "metadata" in form.changed_data:
            obj.save(update_fields=["metadata", "updated_at"])
        self.save_working_memory(request, obj, form)

    def delete_model(self, request: HttpRequest, obj: models.Resource) -> None:
        resource_purge(resource_id=obj.pk)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[models.Resource]) -> None:
        for resource_id in queryset.values_list("pk", flat=True):
            resource_purge(resource_id=resource_id)

    def get_deleted_objects(self, objs: Any, request: HttpRequest) -> Any:
        """The purge's own counts (a dry run): it deletes more than Django's cascade (revisions, tripwire
        logs, files), and the cascade collector would load every message and vector just to list them."""
        totals: dict[str, int] = {}
        for obj in objs:
            for key, count in resource_purge(resource_id=obj.pk, dry_run=True).as_dict().items():
                totals[key.replace("_", " ")] = totals.get(key.replace("_", " "), 0) + count
        return deletion_summary(objs, {k: v for k, v in totals.items() if v})

    @admin.display(description=_("Resource id"), ordering="id")
    def resource_id(self, obj: models.Resource) -> SafeString:
        return clipped(obj.pk)

    @admin.display(description=_("Threads"), ordering="thread_count")
    def thread_count(self, obj: models.Resource) -> int:
        return obj.thread_count  # type: ignore[attr-defined]

    @admin.display(description=_("Working memory"))
    def working_memory_preview(self, obj: models.Resource) -> SafeString | str:
        return clamped(" ".join(obj.working_memory.split())) if obj.working_memory.strip() else "—"

    @admin.display(description=_("Updated"), ordering="updated_at")
    def updated(self, obj: models.Resource) -> SafeString | str:
        return list_time(obj.updated_at)

    @admin.display(description=_("Threads"))
    def threads_link(self, obj: models.Resource) -> SafeString:
        url = changelist_url("thread", urlencode({"resource__id__exact": obj.pk}))
        return format_html('<a href="{}">{}</a>', url, _("%(n)s threads") % {"n": obj.thread_count})  # type: ignore[attr-defined]


@admin.register(models.Thread)
class ThreadAdmin(
    KeySafePagesMixin,
    ThreadKeyPkMixin,
    ThreadArchiveActionsMixin,
    WorkingMemoryAdminMixin,
    admin.ModelAdmin,
):
    form = ThreadForm
    working_memory_scope = "thread"
    # Five columns that fit beside the navigation and the filters at 1280 px.
    list_display = ("display_title", "owner", "message_count", "last_activity", "tripwire_count")
    list_filter = ("agent_id", ArchivedFilter, "created_at", "updated_at", HasTripwiresFilter)
    actions = ("archive_threads", "unarchive_threads")
    search_fields = ("public_id", "title", "resource__id", "messages__text")
    search_help_text = _("Thread id, title, resource id, or text of any message.")
    raw_id_fields = ("resource",)
    list_per_page = 50
    readonly_fields = (
        "public_id",
        "resource_link",
        "agent_id",
        "created_at",
        "updated_at",
        "archived_at",
        "message_count",
        "last_activity",
        "tripwire_count",
        "resource_working_memory",
        "revisions_link",
    )
    fieldsets = (
        (
            None,
            {
                "fields": (
                    "public_id",
                    "resource_link",
                    "agent_id",
                    "title",
                    "metadata",
                    ("message_count", "last_activity", "tripwire_count"),
                    ("created_at", "updated_at", "archived_at"),
                )
            },
        ),
        WorkingMemoryAdminMixin.working_memory_fieldset,
        (_("Resource working memory"), {"fields": ("resource_working_memory",), "classes": ("collapse",)}),
    )

    class Media:
        css = ADMIN_MEDIA_CSS

    def get_queryset(self, request: HttpRequest) -> QuerySet[models.Thread]:
        return threads_for_admin()

    def get_fieldsets(self, request: HttpRequest, obj: models.Thread | None = None) -> Any:
        """The working memory the thread's agent uses comes first and open; the other scope's, which
        the agent never reads, folds away below it."""
        fieldsets = list(super().get_fieldsets(request, obj))
        if obj is None or working_memory_scope_in_use(obj) != "resource":
            return fieldsets
        at = {f: i for i, (_name, options) in enumerate(fieldsets) for f in options.get("fields", ())}
        if "working_memory_text" not in at or "resource_working_memory" not in at:
            return fieldsets
        thread_at, resource_at = at["working_memory_text"], at["resource_working_memory"]
        thread_options = fieldsets[thread_at][1]
        resource_name, resource_options = fieldsets[resource_at]
        agent = {"agent": obj.agent_id}
        in_use = _("In use: agent %(agent)s keeps its working memory per resource.") % agent
        unused = _("Agent %(agent)s never reads this; it uses the resource's working memory.") % agent
        fieldsets[thread_at] = (resource_name, {**resource_options, "classes": (), "description": in_use})
        fieldsets[resource_at] = (
            _("Thread working memory (not used)"),
            {**thread_options, "classes": ("collapse",), "description": unused},
        )
        return fieldsets

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # threads are created by conversations (the API, agents, the memory API)

    def save_model(self, request: HttpRequest, obj: models.Thread, form: ThreadForm, change: bool) -> None:
        changed = set(form.changed_data)
        if changed & {"title", "metadata"}:
            thread_update(
                thread=obj,
                title=obj.title if "title" in changed else None,
                metadata=obj.metadata if "metadata" in changed else None,
            )
        self.save_working_memory(request, obj, form)

    def delete_model(self, request: HttpRequest, obj: models.Thread) -> None:
        thread_delete(thread=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[models.Thread]) -> None:
        with transaction.atomic(using=memproc_db()):
            for thread in queryset:
                thread_delete(thread=thread)

    def get_deleted_objects(self, objs: Any, request: HttpRequest) -> Any:
        """Counts instead of Django's cascade listing, which would load every message and embedding."""
        ids = [obj.pk for obj in objs]
        counts = {
            _("threads"): len(ids),
            _("messages"): models.Message.objects.filter(thread_id__in=ids).count(),
            _("message embeddings"): models.MessageEmbedding.objects.filter(thread_rows(objs)).count(),
            _("attachments"): models.Attachment.objects.filter(message__thread_id__in=ids).count(),
        }
        return deletion_summary(objs, {k: v for k, v in counts.items() if v})

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: Any = None,
    ) -> Any:
        if obj is not None:
            context["transcript"] = transcript_context(
                thread_key=obj.pk, page=request.GET.get("transcript_page")
            )
        return super().render_change_form(request, context, add, change, form_url, obj)

    @admin.display(description=_("Thread"), ordering="title")
    def display_title(self, obj: models.Thread) -> SafeString:
        """The title over the thread id; an untitled thread by its id alone."""
        if not obj.title:
            return clipped(_("(untitled) %(id)s") % {"id": obj.public_id})
        return stacked(clamped(obj.title), clipped(obj.public_id, quiet=True))

    @admin.display(description=_("Resource"), ordering="resource_id")
    def owner(self, obj: models.Thread) -> SafeString:
        """The resource (a link) over the agent."""
        agent = clipped(obj.agent_id, quiet=True) if obj.agent_id else None
        return stacked(clipped(obj.resource_id, url=admin_url("resource", obj.resource_id)), agent)

    @admin.display(description=_("Resource"), ordering="resource_id")
    def resource_link(self, obj: models.Thread) -> Any:
        return admin_link("resource", obj.resource_id)

    @admin.display(description=_("Messages"), ordering="message_count")
    def message_count(self, obj: models.Thread) -> int:
        return obj.message_count  # type: ignore[attr-defined]

    @admin.display(description=_("Last activity"), ordering="last_message_at")
    def last_activity(self, obj: models.Thread) -> Any:
        return list_time(obj.last_message_at)  # type: ignore[attr-defined]

    @admin.display(description=_("Tripwires"), ordering="tripwire_count")
    def tripwire_count(self, obj: models.Thread) -> Any:
        count = obj.tripwire_count  # type: ignore[attr-defined]
        if not count:
            return 0
        query = {"thread_id": obj.public_id, "resource_id__exact": obj.resource_id}
        url = changelist_url("tripwirelog", urlencode(query))
        return format_html('<a class="memproc-badge memproc-badge-warn" href="{}">{}</a>', url, count)

    @admin.display(description=_("Resource working memory"))
    def resource_working_memory(self, obj: models.Thread) -> SafeString:
        text = (
            models.Resource.objects.filter(pk=obj.resource_id)
            .values_list("working_memory", flat=True)
            .first()
        )
        return format_html(
            '<pre class="memproc-pre">{}</pre><a href="{}">{}</a>',
            text or "—",
            admin_url("resource", obj.resource_id) or "",
            _("Edit it on the resource"),
        )
