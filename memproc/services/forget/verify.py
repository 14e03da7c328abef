"""Proof that a forget held: no row, vector or stored file of the resource still holds what went."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from django.db import models as django_models
from django.db.models import Q
from django.utils import timezone

from memproc import models
from memproc.models import thread_key
from memproc.selectors.export import resource_rows
from memproc.services.forget.fingerprints import Matcher, key_digests

TIME_FIELDS = ("created_at", "started_at")


@dataclass(frozen=True, slots=True)
class Finding:
    """Where forgotten data still is: a table and row, a vector, a stored file, or held memory."""

    receipt: str
    where: str
    detail: str

    def __str__(self) -> str:
        return f"{self.where}: {self.detail} (receipt {self.receipt})"


def verify(*, resource_id: str) -> list[Finding]:
    """Checks every ForgetReceipt of the resource; marks the clean ones verified. An empty list is
    the proof: no message, embedding, attachment row or stored file that went is back or left, no
    text field of any memproc table of the resource holds a forgotten passage, and no working-memory
    change is still held for review."""
    findings: list[Finding] = []
    receipts = list(models.ForgetReceipt.objects.filter(resource_id=resource_id).order_by("created_at"))
    texts = list(_texts(resource_id)) if any(r.fingerprints for r in receipts) else []
    for receipt in receipts:
        mine = list(_check(receipt, texts))
        findings += mine
        if not mine:
            models.ForgetReceipt.objects.filter(pk=receipt.pk).update(verified_at=timezone.now())
    return findings


def _check(receipt: models.ForgetReceipt, texts: list[tuple[str, str]]) -> Iterator[Finding]:
    name = str(receipt.pk)
    if receipt.message_keys:
        forgotten = set(receipt.message_keys)
        messages = models.Message.objects.filter(resource_id=receipt.resource_id)
        for key, public_id in messages.values_list("pk", "public_id").iterator():
            if key_digests([key], salt=receipt.salt)[0] in forgotten:
                yield Finding(name, "memproc_message", f"message {public_id!r} is stored")
        vectors = models.MessageEmbedding.objects.filter(resource_id=receipt.resource_id)
        held = {k for k in vectors.values_list("message_id", flat=True).distinct().iterator()}
        if any(key_digests([k], salt=receipt.salt)[0] in forgotten for k in held):
            yield Finding(name, "memproc_messageembedding", "vectors of forgotten messages are stored")
    if receipt.scope == models.ForgetReceipt.Scope.THREAD:
        if models.Thread.objects.filter(pk=thread_key(receipt.resource_id, receipt.thread_id)).exists():
            yield Finding(name, "memproc_thread", f"thread {receipt.thread_id!r} is stored")
    if receipt.scope == models.ForgetReceipt.Scope.RESOURCE:
        # What the resource stored before it was forgotten; a conversation begun since is its own.
        for kind, rows in resource_rows(resource_id=receipt.resource_id).items():
            stamp = next((f for f in TIME_FIELDS if f in {x.name for x in rows.model._meta.fields}), None)
            if kind == "resource" or stamp is None:
                continue
            if rows.filter(**{f"{stamp}__lte": receipt.created_at}).exists():
                yield Finding(name, kind, "rows of the forgotten resource are stored")
    yield from _files(receipt)
    for entry in receipt.held or []:
        yield Finding(
            name,
            "memproc_workingmemoryrevision",
            f"{entry['scope']} working memory held for review from version {entry['from_version']}",
        )
    if receipt.fingerprints:
        matcher = Matcher(receipt.fingerprints, salt=receipt.salt)
        for where, text in texts:
            if matcher.found_in(text):
                yield Finding(name, where, "holds a passage of forgotten text")


def _files(receipt: models.ForgetReceipt) -> Iterator[Finding]:
    """A forgotten file is gone from storage unless a message that was not forgotten uses it; and no
    other copy of its content is kept under the resource (paths are content-addressed)."""
    storage = models.Attachment._meta.get_field("file").storage
    for entry in receipt.files or []:
        file_name, sha = entry.get("name") or "", entry.get("sha256") or ""
        if models.Attachment.objects.filter(
            Q(file=file_name) | Q(sha256=sha), resource_id=receipt.resource_id
        ).exists():
            continue  # still attached to a message that was not forgotten
        folder = file_name.rsplit("/", 1)[0] if "/" in file_name else ""
        try:
            _, held = storage.listdir(folder) if folder else ([], [])
        except (FileNotFoundError, OSError):
            held = []
        for kept in held:
            yield Finding(str(receipt.pk), "storage", f"{folder}/{kept} is still stored")


def _texts(resource_id: str) -> Iterator[tuple[str, str]]:
    """(where, text) for every text-bearing field of every row memproc holds about the resource."""
    rows = resource_rows(resource_id=resource_id)
    threads = rows["threads"].values("id")
    querysets = [
        *rows.values(),
        models.ThreadSummary.objects.filter(thread_id__in=threads),
        models.SummaryRevision.objects.filter(thread_id__in=threads),
        models.IdempotencyRecord.objects.filter(resource_id=resource_id),
    ]
    for queryset in querysets:
        model = queryset.model
        fields = [
            f.attname
            for f in model._meta.concrete_fields
            if isinstance(f, django_models.CharField | django_models.TextField | django_models.JSONField)
            and not f.primary_key
        ]
        for values in queryset.values_list("pk", *fields).iterator():
            pk, *found = values
            text = "\n".join(_strings(found))
            if text:
                yield f"{model._meta.db_table} {pk}", text


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item)
    elif value is not None and not isinstance(value, int | float | bool):
        yield json.dumps(value, default=str)
