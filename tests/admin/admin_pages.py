"""Every page of memproc's admin over the crowded data (tests/admin/crowded_data.py): the app index,
each registered model's changelist, change, history and delete pages, and the custom views. Shared by
the tests that render them all (test_pages, test_thread_ids) and the browser test that measures them
(test_admin_fits_browser)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib import admin
from django.contrib.admin.utils import quote
from django.test import RequestFactory
from django.urls import reverse

from memproc import models
from tests.admin.crowded_data import RESOURCE, Crowded

# URL names of memproc's admins that are not pages a person reads, by suffix.
NOT_PAGES = {
    "download": "an attachment as a file download",
    "autocomplete": "JSON for the autocomplete widgets",
}


@dataclass(frozen=True)
class AdminPage:
    name: str  # the URL name without its namespace, e.g. "memproc_thread_change"
    url: str

    def __str__(self) -> str:
        return f"{self.name} ({self.url})"


def memproc_admins() -> dict[type, Any]:
    return {m: ma for m, ma in admin.site._registry.items() if m._meta.app_label == "memproc"}


def memproc_url_names() -> set[str]:
    """The names of every URL memproc's model admins define, pages or not."""
    return {p.name for model_admin in memproc_admins().values() for p in model_admin.get_urls() if p.name}


def sample_objects(data: Crowded) -> dict[str, list[Any]]:
    """The primary keys whose change pages are visited, per model: the longest names first."""
    thread = data.thread
    return {
        "resource": [RESOURCE],
        "thread": [thread.pk, data.conversation.thread.pk],  # and the 200-message transcript
        "message": [data.messages[1].pk],
        "tripwirelog": [data.tripwire.pk, data.conversation.not_stored.pk],
        "attachment": [data.attachment.pk, data.conversation.text_attachment.pk],
        "workingmemoryrevision": [
            models.WorkingMemoryRevision.objects.filter(scope="thread", key=thread.pk).first().pk
        ],
        "messageembedding": [models.MessageEmbedding.objects.filter(message__thread=thread).first().pk],
        "turnrecord": [data.turn_record.pk, data.turns.last.pk],
        "outboxjob": [data.outbox_job.pk],
        "forgetreceipt": [data.forget_receipt.pk],
        "pendingtoolcall": [data.pending_call.pk],
        "threadsummary": [thread.pk],
        "summaryrevision": [models.SummaryRevision.objects.filter(thread=thread).first().pk],
    }


def admin_pages(data: Crowded, *, user: Any) -> list[AdminPage]:
    """Every memproc admin page `user` may open, over `data`."""
    request = _request_of(user)
    samples = sample_objects(data)
    pages = [AdminPage("app_list", reverse("admin:app_list", args=["memproc"]))]
    for model, model_admin in memproc_admins().items():
        name = model._meta.model_name
        info = f"memproc_{name}"
        pages.append(AdminPage(f"{info}_changelist", reverse(f"admin:{info}_changelist")))
        if model_admin.has_add_permission(request):
            pages.append(AdminPage(f"{info}_add", reverse(f"admin:{info}_add")))
        pks = samples[name]  # a KeyError: a new model needs its sample here
        for pk in pks:
            pages.append(AdminPage(f"{info}_change", reverse(f"admin:{info}_change", args=[quote(pk)])))
        pages.append(AdminPage(f"{info}_history", reverse(f"admin:{info}_history", args=[quote(pks[0])])))
        if model_admin.has_delete_permission(request):
            pages.append(AdminPage(f"{info}_delete", reverse(f"admin:{info}_delete", args=[quote(pks[0])])))
    tripwires = "memproc_tripwirelog"
    pages += [
        AdminPage(
            f"{tripwires}_changelist", reverse(f"admin:{tripwires}_changelist") + "?status__exact=pending"
        ),
        AdminPage(f"{tripwires}_review", reverse(f"admin:{tripwires}_review", args=[data.tripwire.pk])),
        AdminPage(f"{tripwires}_flagged_messages", reverse(f"admin:{tripwires}_flagged_messages")),
        AdminPage(
            f"{tripwires}_flagged_messages", reverse(f"admin:{tripwires}_flagged_messages") + "?status=all"
        ),
        AdminPage(
            f"{tripwires}_message_flag",
            reverse(f"admin:{tripwires}_message_flag", args=[quote(data.flagged.pk)]),
        ),
    ]
    return pages


def unvisited_url_names(pages: list[AdminPage], *, user: Any) -> set[str]:
    """memproc admin URL names no page of `pages` opens, apart from those that are not pages and the
    add and delete pages the admin refuses `user`."""
    request = _request_of(user)
    refused = {
        f"memproc_{model._meta.model_name}_{view}"
        for model, model_admin in memproc_admins().items()
        for view, allowed in (
            ("add", model_admin.has_add_permission),
            ("delete", model_admin.has_delete_permission),
        )
        if not allowed(request)
    }
    return {
        name
        for name in memproc_url_names() - {page.name for page in pages} - refused
        if not name.endswith(tuple(f"_{suffix}" for suffix in NOT_PAGES))
    }


def _request_of(user: Any) -> Any:
    request = RequestFactory().get("/admin/")
    request.user = user
    return request
