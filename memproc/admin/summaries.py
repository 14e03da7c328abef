"""Thread summaries (`Memory(compaction=...)`) in the admin: read and correct a summary, and see how
it was folded, revision by revision."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django import forms
from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext_lazy as _

from memproc import models
from memproc.admin.cells import clamped, clipped, list_time, nowrap, stacked, thread_lines
from memproc.admin.common import (
    ADMIN_MEDIA_CSS,
    KeySafePagesMixin,
    ReadOnlyAdmin,
    ThreadKeyPkMixin,
    UserLinksMixin,
    admin_link,
    changelist_url,
    one_line,
)
from memproc.admin.working_memory import render_diff
from memproc.services.compaction.summary import thread_summary_update

HISTORY_LIMIT = 10
# The summary page's table of revisions: (heading, cell class); on a phone each row stacks its cells.
REVISION_COLUMNS = (
    (_("Version"), ""),
    (_("When"), "memproc-time"),
    (_("Source"), ""),
    (_("Covers"), "memproc-nowrap"),
    (_("Tokens"), ""),
    (_("By"), "memproc-wrap"),
)

Source = models.SummaryRevision.Source


class ThreadSummaryForm(forms.ModelForm):
    """The summary text, saved through `thread_summary_update` (a revision, compare-and-swap): an
    edit made against an older version than the stored one (a fold ran meanwhile) is refused."""

    seen_version = forms.IntegerField(required=False, widget=forms.HiddenInput)

    class Meta:
        model = models.ThreadSummary
        fields = ("text",)
        widgets = {"text": forms.Textarea(attrs={"rows": 18, "class": "vLargeTextField memproc-mono"})}
        help_texts = {
            "text": _(
                "Saved as a new revision (source: admin). The model sees it on the thread's next turn; "
                "later folds build on it."
            )
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["seen_version"].initial = self.instance.version
        self.fields["text"].strip = False

    def clean_text(self) -> str:
        return (self.cleaned_data.get("text") or "").replace("\r\n", "\n")

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        seen = cleaned.get("seen_version")
        stored = (
            models.ThreadSummary.objects.filter(pk=self.instance.pk).values_list("version", flat=True).first()
        )
        if seen is not None and stored is not None and seen != stored:
            self.add_error(
                "text",
                _(
                    "The summary changed since this page was opened (now version %(v)s). Reload the page "
                    "and apply your edit again."
                )
                % {"v": stored},
            )
        return cleaned


@admin.register(models.ThreadSummary)
class ThreadSummaryAdmin(KeySafePagesMixin, ThreadKeyPkMixin, admin.ModelAdmin):
    form = ThreadSummaryForm
    thread_id_lookup = "thread__public_id"
    list_display = ("thread_link", "covered_sequence", "version", "token_count", "updated", "excerpt")
    search_fields = ("=thread__public_id", "text")
    search_help_text = _("Thread id (exact), or text in the summary.")
    fields = (
        "thread_link",
        "covered_sequence",
        "version",
        "token_count",
        "updated_at",
        "text",
        "seen_version",
        "revisions",
    )
    readonly_fields = ("thread_link", "covered_sequence", "version", "token_count", "updated_at", "revisions")
    list_per_page = 50

    class Media:
        css = ADMIN_MEDIA_CSS

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # summaries are made by compaction; an operator corrects one

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # every change is a revision

    def save_model(self, request: HttpRequest, obj: models.ThreadSummary, form: Any, change: bool) -> None:
        if "text" in form.changed_data:
            saved = thread_summary_update(
                thread_key=obj.pk,
                text=form.cleaned_data["text"],
                source=Source.ADMIN,
                actor=request.user,
                seen_version=form.cleaned_data.get("seen_version"),
            )
            obj.version, obj.token_count, obj.updated_at = saved.version, saved.token_count, saved.updated_at

    @admin.display(description=_("Thread"), ordering="thread")
    def thread_link(self, obj: models.ThreadSummary) -> Any:
        return thread_lines(obj.thread_id)

    @admin.display(description=_("Updated"), ordering="updated_at")
    def updated(self, obj: models.ThreadSummary) -> SafeString | str:
        return list_time(obj.updated_at)

    @admin.display(description=_("Summary"))
    def excerpt(self, obj: models.ThreadSummary) -> SafeString | str:
        return clamped(one_line(obj.text, limit=300)) if obj.text else "—"

    @admin.display(description=_("Revisions"))
    def revisions(self, obj: models.ThreadSummary) -> SafeString:
        rows = (
            models.SummaryRevision.objects.filter(thread_id=obj.thread_id)
            .prefetch_related("actor")
            .defer("text")
            .order_by("-version")[:HISTORY_LIMIT]
        )
        body = format_html_join("", "<tr>{}</tr>", ((_row(r),) for r in rows))
        head = format_html_join("", "<th>{}</th>", ((label,) for label, _css in REVISION_COLUMNS))
        url = changelist_url("summaryrevision", urlencode({"thread__id__exact": obj.thread_id}))
        return format_html(
            '<table class="memproc-stack-narrow"><thead><tr>{}</tr></thead><tbody>{}</tbody></table>'
            '<p><a href="{}">{}</a></p>',
            head,
            body,
            url,
            _("All revisions of this summary"),
        )


def _row(revision: models.SummaryRevision) -> SafeString:
    """One revision's cells in the summary page's table, each labelled with its column."""
    compaction = revision.source == Source.COMPACTION
    first = revision.previous_sequence + 1 if compaction else revision.covered_sequence
    values = (
        admin_link("summaryrevision", revision.pk, f"v{revision.version}"),
        revision.created_at.strftime("%Y-%m-%d %H:%M:%S"),
        revision.get_source_display(),
        f"#{first}–#{revision.covered_sequence}",
        revision.token_count,
        revision.summarizer or (revision.actor or ""),
    )
    cells = ((label, css, value) for (label, css), value in zip(REVISION_COLUMNS, values, strict=True))
    return format_html_join("", '<td data-label="{}" class="{}">{}</td>', cells)


@admin.register(models.SummaryRevision)
class SummaryRevisionAdmin(UserLinksMixin, ReadOnlyAdmin):
    # Five columns that fit beside the filters at 1280 px: the revision and what it covers, what it
    # folded, what came out and who or what wrote it.
    list_display = ("created", "thread_link", "revision", "folded", "result")
    list_filter = ("source", "created_at")
    user_links = ("actor",)
    search_fields = ("=thread__public_id",)
    search_help_text = _("Thread id (exact).")
    raw_id_fields = ("actor",)
    fields = (
        "created_at",
        "thread_link",
        "version",
        "source",
        "actor",
        "covers",
        "folded_messages",
        "folded_tokens",
        "token_count",
        "summarizer",
        "duration",
        "diff",
        "text",
    )
    readonly_fields = fields
    list_per_page = 50

    class Media:
        css = ADMIN_MEDIA_CSS

    def get_queryset(self, request: HttpRequest) -> QuerySet[models.SummaryRevision]:
        return super().get_queryset(request).defer("text")

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # the audit trail of what compaction and operators wrote

    @admin.display(description=_("Created"), ordering="created_at")
    def created(self, obj: models.SummaryRevision) -> SafeString | str:
        return list_time(obj.created_at)

    @admin.display(description=_("Thread"), ordering="thread")
    def thread_link(self, obj: models.SummaryRevision) -> Any:
        return thread_lines(obj.thread_id)

    @admin.display(description=_("Revision"), ordering="version")
    def revision(self, obj: models.SummaryRevision) -> SafeString:
        label = format_html(
            '<span class="memproc-nowrap">v{} · {}</span>', obj.version, obj.get_source_display()
        )
        return stacked(
            label, format_html('<span class="memproc-quiet memproc-nowrap">{}</span>', self.covers(obj))
        )

    @admin.display(description=_("Folded"))
    def folded(self, obj: models.SummaryRevision) -> SafeString | str:
        if obj.source != Source.COMPACTION:
            return "—"
        return stacked(
            nowrap(_("%(n)s messages") % {"n": obj.folded_messages}),
            nowrap(_("%(n)s tokens") % {"n": obj.folded_tokens}),
        )

    @admin.display(description=_("Result"), ordering="token_count")
    def result(self, obj: models.SummaryRevision) -> SafeString:
        """The summary's tokens, over what wrote it (the summarizer, or the operator) and how long it took."""
        by = obj.summarizer or (obj.actor or "")
        took = format_html('<span class="memproc-quiet memproc-nowrap">{}</span>', self.duration(obj))
        tokens = nowrap(_("%(n)s tokens") % {"n": obj.token_count})
        return stacked(
            tokens, clipped(by, quiet=True) if by else None, took if obj.source == Source.COMPACTION else None
        )

    @admin.display(description=_("Covers"))
    def covers(self, obj: models.SummaryRevision) -> str:
        if obj.source != Source.COMPACTION:
            return f"through #{obj.covered_sequence} (edited)"
        return f"#{obj.previous_sequence + 1}–#{obj.covered_sequence}"

    @admin.display(description=_("Duration"), ordering="duration_ms")
    def duration(self, obj: models.SummaryRevision) -> str:
        return f"{obj.duration_ms:.1f} ms" if obj.source == Source.COMPACTION else "—"

    @admin.display(description=_("Diff"))
    def diff(self, obj: models.SummaryRevision) -> SafeString:
        previous = (
            models.SummaryRevision.objects.filter(thread_id=obj.thread_id, version__lt=obj.version)
            .order_by("-version")
            .values_list("text", flat=True)
            .first()
        )
        return render_diff(previous or "", obj.text)
