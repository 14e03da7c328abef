"""Working memory in the admin: an edit form that writes through the service, and revision history."""

from __future__ import annotations

import difflib
import json
from typing import Any, ClassVar
from urllib.parse import urlencode

from django import forms
from django.contrib import admin
from django.db.models import Q, QuerySet
from django.http import HttpRequest
from django.template.loader import render_to_string
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext_lazy as _

from memproc import models
from memproc.admin.cells import clipped, list_time, nowrap, stacked, thread_lines
from memproc.admin.common import (
    ADMIN_MEDIA_CSS,
    ReadOnlyAdmin,
    UserLinksMixin,
    admin_url,
    changelist_url,
    thread_admin_link,
)
from memproc.agents import all_agents, get_agent
from memproc.exceptions import MemprocError
from memproc.processors.working_memory import check_size
from memproc.selectors.threads import working_memory_get
from memproc.services.working_memory import compute_next, parse_json_memory, working_memory_update

HISTORY_LIMIT = 20
DIFF_CONTEXT_LINES = 3

Source = models.WorkingMemoryRevision.Source


# --- diffs ----------------------------------------------------------------------------------------


def _diff_text(text: str) -> list[str]:
    """Schema-mode memory is compact JSON on one line; indent it so the diff shows which key changed."""
    stripped = text.strip()
    if stripped.startswith("{"):
        try:
            return json.dumps(json.loads(stripped), indent=2, sort_keys=True, ensure_ascii=False).splitlines()
        except ValueError:
            pass
    return text.splitlines()


def diff_lines(old: str, new: str) -> list[tuple[str, str]]:
    """A unified diff as (kind, line) pairs; kind is hunk, add, del or ctx. Empty when nothing changed."""
    lines = []
    for line in difflib.unified_diff(_diff_text(old), _diff_text(new), lineterm="", n=DIFF_CONTEXT_LINES):
        if line.startswith(("---", "+++")):
            continue
        kind = {"@": "hunk", "+": "add", "-": "del"}.get(line[:1], "ctx")
        lines.append((kind, line))
    return lines


def diff_stats(old: str, new: str) -> tuple[int, int]:
    lines = diff_lines(old, new)
    return sum(k == "add" for k, _ in lines), sum(k == "del" for k, _ in lines)


def render_diff(old: str, new: str) -> SafeString:
    return render_to_string("admin/memproc/includes/diff.html", {"lines": diff_lines(old, new)})


def revision_views(*, scope: str, key: str, limit: int = HISTORY_LIMIT) -> list[dict[str, Any]]:
    """The newest revisions of one working memory with their diffs. One query."""
    revisions = (
        models.WorkingMemoryRevision.objects.filter(scope=scope, key=key)
        .prefetch_related("actor")
        .order_by("-created_at", "-version")[:limit]
    )
    return [{"revision": r, "diff": diff_lines(r.old, r.new)} for r in revisions]


# --- the edit form --------------------------------------------------------------------------------


class WorkingMemoryForm(forms.ModelForm):
    """Adds the working memory as a plain form field; the admin saves it through `working_memory_update`.

    The field is not the model field, so a save of the other fields never writes working memory
    directly (which would skip the revision and race with the model's own updates).
    """

    scope: ClassVar[str]

    working_memory_text = forms.CharField(
        label=_("Working memory"),
        required=False,
        strip=False,
        widget=forms.Textarea(attrs={"rows": 14, "class": "vLargeTextField memproc-mono"}),
        help_text=_("Saved as a new revision (source: admin). The model sees it on the next turn."),
    )
    working_memory_seen_version = forms.IntegerField(required=False, widget=forms.HiddenInput)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["working_memory_text"].initial = self.instance.working_memory
        self.fields["working_memory_seen_version"].initial = self.instance.working_memory_version

    def clean_working_memory_text(self) -> str:
        # Browsers send CRLF; stored memory uses LF, so an untouched textarea is no change.
        return (self.cleaned_data.get("working_memory_text") or "").replace("\r\n", "\n")

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        if self.working_memory_changed():
            self._validate_working_memory(
                cleaned["working_memory_text"], cleaned.get("working_memory_seen_version")
            )
        return cleaned

    def working_memory_changed(self) -> bool:
        text = self.cleaned_data.get("working_memory_text")
        # Trailing whitespace is not a change: browsers and editors add or drop final newlines.
        return text is not None and text.rstrip() != self.instance.working_memory.rstrip()

    def _validate_working_memory(self, text: str, seen_version: int | None) -> None:
        current, version = working_memory_get(scope=self.scope, key=self.instance.pk)
        if seen_version is not None and seen_version != version:
            self.add_error(
                "working_memory_text",
                _(
                    "The working memory changed since this page was opened (now version %(v)s). Reload the "
                    "page and apply your edit again."
                )
                % {"v": version},
            )
            return
        if current.strip().startswith("{") and parse_json_memory(current) and not _is_json_object(text):
            self.add_error(
                "working_memory_text", _("This working memory is JSON (schema mode): enter a JSON object.")
            )
            return
        try:
            compute_next(current=current, value=text, mode="markdown")
            check_size(text, max_tokens=working_memory_limit(self.scope, self.instance))
        except MemprocError as exc:
            self.add_error("working_memory_text", str(exc))


def working_memory_limit(scope: str, owner: Any) -> int | None:
    """The `working_memory={"max_tokens": ...}` an edit must respect: the thread's agent's; for a
    resource, the smallest of the registered agents that keep resource-scoped working memory."""
    if scope == "thread":
        try:
            processors = [get_agent(owner.agent_id).memory.working_memory_processor]
        except (LookupError, AttributeError):
            return None
    else:
        processors = [a.memory.working_memory_processor for a in all_agents() if a.memory is not None]
    limits = [p.max_tokens for p in processors if p is not None and p.scope == scope and p.max_tokens]
    return min(limits, default=None)


def working_memory_scope_in_use(thread: Any) -> str | None:
    """The scope ("thread" or "resource") whose working memory the thread's agent reads and writes;
    None when the agent is not registered or keeps no working memory."""
    try:
        memory = get_agent(thread.agent_id).memory
    except LookupError:
        return None
    processor = memory.working_memory_processor if memory is not None else None
    return processor.scope if processor is not None else None


def _is_json_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


class WorkingMemoryAdminMixin:
    """For the Thread and Resource admins: saves working-memory edits through the service and shows
    the revision history on the change page."""

    working_memory_scope: ClassVar[str]
    working_memory_fieldset = (
        _("Working memory"),
        {"fields": ("working_memory_text", "working_memory_seen_version", "revisions_link")},
    )

    def save_working_memory(self, request: HttpRequest, obj: Any, form: WorkingMemoryForm) -> None:
        if form.working_memory_changed():
            working_memory_update(
                scope=self.working_memory_scope,
                key=obj.pk,
                value=form.cleaned_data["working_memory_text"],
                source=Source.ADMIN,
                actor=request.user,
                mode="markdown",
                max_tokens=working_memory_limit(self.working_memory_scope, obj),
            )

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
            context["working_memory_history"] = revision_views(scope=self.working_memory_scope, key=obj.pk)
            context["working_memory_history_url"] = self._revisions_url(obj)
        return super().render_change_form(request, context, add, change, form_url, obj)  # type: ignore[misc]

    @admin.display(description=_("Revisions"))
    def revisions_link(self, obj: Any) -> SafeString:
        return format_html('<a href="{}">{}</a>', self._revisions_url(obj), _("All working-memory revisions"))

    def _revisions_url(self, obj: Any) -> str:
        return changelist_url(
            "workingmemoryrevision", urlencode({"scope__exact": self.working_memory_scope, "key": obj.pk})
        )


# --- the revision admin ---------------------------------------------------------------------------


@admin.register(models.WorkingMemoryRevision)
class WorkingMemoryRevisionAdmin(UserLinksMixin, ReadOnlyAdmin):
    list_display = ("created", "owner_of", "revision", "actor", "change_summary")
    list_filter = ("scope", "source", "created_at")
    user_links = ("actor",)
    search_fields = ("=key", "new")
    search_help_text = _("Thread or resource id (exact), or text in the new value.")
    raw_id_fields = ("actor",)
    fields = (
        "created_at",
        "scope",
        "owner_link",
        "thread_link",
        "version",
        "source",
        "actor",
        "diff",
        "old",
        "new",
    )
    readonly_fields = fields
    list_per_page = 50

    class Media:
        css = ADMIN_MEDIA_CSS

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # the audit trail of what the model and operators wrote

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[models.WorkingMemoryRevision], search_term: str
    ) -> tuple[QuerySet[models.WorkingMemoryRevision], bool]:
        """Also by the thread id people use: revisions store the thread's key, which nobody types.
        The threads come from the (thread id, resource) index, the revisions from the key index."""
        results, may_have_duplicates = super().get_search_results(request, queryset, search_term)
        term = search_term.strip()
        if term:
            keys = models.Thread.objects.filter(public_id=term).values("pk")
            thread_scope = Q(scope=models.WorkingMemoryRevision.Scope.THREAD, key__in=keys)
            results |= queryset.filter(thread_scope | Q(thread_id__in=keys))
        return results, may_have_duplicates

    @admin.display(description=_("Created"), ordering="created_at")
    def created(self, obj: models.WorkingMemoryRevision) -> SafeString | str:
        return list_time(obj.created_at)

    @admin.display(description=_("Owner"), ordering="key")
    def owner_of(self, obj: models.WorkingMemoryRevision) -> SafeString:
        """The thread or resource, under its scope."""
        return stacked(nowrap(obj.get_scope_display()), self.owner_link(obj))

    @admin.display(description=_("Revision"), ordering="version")
    def revision(self, obj: models.WorkingMemoryRevision) -> SafeString:
        return nowrap(f"v{obj.version} · {obj.get_source_display()}")

    @admin.display(description=_("Owner"), ordering="key")
    def owner_link(self, obj: models.WorkingMemoryRevision) -> Any:
        if obj.scope == models.WorkingMemoryRevision.Scope.THREAD:
            return thread_lines(obj.key)
        return clipped(obj.key, url=admin_url(obj.scope, obj.key))

    @admin.display(description=_("Thread"))
    def thread_link(self, obj: models.WorkingMemoryRevision) -> Any:
        return thread_admin_link(obj.thread_id, with_resource=True)

    @admin.display(description=_("Change"))
    def change_summary(self, obj: models.WorkingMemoryRevision) -> SafeString:
        added, removed = diff_stats(obj.old, obj.new)
        return format_html(
            '<span class="memproc-diff-add">+{}</span> <span class="memproc-diff-del">−{}</span>',
            added,
            removed,
        )

    @admin.display(description=_("Diff"))
    def diff(self, obj: models.WorkingMemoryRevision) -> SafeString:
        return render_diff(obj.old, obj.new)
