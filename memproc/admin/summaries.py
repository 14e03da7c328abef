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
from memproc.admin.common import (
    ADMIN_MEDIA_CSS,
    KeySafePagesMixin,
    ReadOnlyAdmin,
    ThreadKeyPkMixin,
    UserLinksMixin,
    admin_link,
    changelist_url,
    one_line,
    thread_admin_link,
)
from memproc.admin.working_memory import render_diff
from memproc.services.compaction.summary import thread_summary_update

HISTORY_LIMIT = 10

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
    list_display = ("thread_link", "covered_sequence", "version", "token_count", "updated_at", "excerpt")
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
        return thread_admin_link(obj.thread_id, with_resource=True)

    @admin.display(description=_("Summary"))
    def excerpt(self, obj: models.ThreadSummary) -> str:
        return one_line(obj.text, limit=100)

    @admin.display(description=_("Revisions"))
    def revisions(self, obj: models.ThreadSummary) -> SafeString:
        rows = (
            models.SummaryRevision.objects.filter(thread_id=obj.thread_id)
            .prefetch_related("actor")
            .defer("text")
            .order_by("-version")[:HISTORY_LIMIT]
        )
        table = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>#{}–#{}</td><td>{}</td><td>{}</td></tr>",
            (
                (
                    admin_link("summaryrevision", r.pk, f"v{r.version}"),
                    r.created_at.strftime("%Y-%m-%d %H:%M:%S"),
                    r.get_source_display(),
                    r.previous_sequence + 1 if r.source == Source.COMPACTION else r.covered_sequence,
                    r.covered_sequence,
                    r.token_count,
                    r.summarizer or (r.actor or ""),
                )
                for r in rows
            ),
        )
        url = changelist_url("summaryrevision", urlencode({"thread__id__exact": obj.thread_id}))
        return format_html(
            "<table><thead><tr><th>{}</th><th>{}</th><th>{}</th><th>{}</th><th>{}</th><th>{}</th></tr>"
            '</thead><tbody>{}</tbody></table><p><a href="{}">{}</a></p>',
            _("Version"),
            _("When"),
            _("Source"),
            _("Covers"),
            _("Tokens"),
            _("By"),
            table,
            url,
            _("All revisions of this summary"),
        )


@admin.register(models.SummaryRevision)
class SummaryRevisionAdmin(UserLinksMixin, ReadOnlyAdmin):
    list_display = (
        "created_at",
        "thread_link",
        "version",
        "source",
        "covers",
        "folded_messages",
        "folded_tokens",
        "token_count",
        "summarizer",
        "duration",
    )
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

    @admin.display(description=_("Thread"), ordering="thread")
    def thread_link(self, obj: models.SummaryRevision) -> Any:
        return thread_admin_link(obj.thread_id, with_resource=True)

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
