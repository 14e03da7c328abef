"""Forgetting: messages, a thread or a whole resource, and with `cascade` everything derived from them.

Derived means, by lineage: the messages' embeddings (their rows), the compaction summaries that
covered them (dropped, with their revisions; the next fold starts over from what remains), the
working-memory changes their turns wrote (`take_back`), attachment files no remaining message uses,
the answers kept for Idempotency-Key retries of their threads, and the ids the turn records name
(scrubbed). Forgetting a thread also drops its turn records and tripwire logs; forgetting a resource
is `resource_purge`. Each forget leaves a ForgetReceipt that holds no forgotten text, which
`verify` (and `manage.py memproc_forget --verify`) checks against every table and stored file.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Sequence
from typing import Any

from django.db import transaction

from memproc import models
from memproc.db import memproc_db
from memproc.exceptions import ValidationError
from memproc.models import message_keys, public_thread_id, thread_key
from memproc.services.forget.fingerprints import fingerprints, key_digests
from memproc.services.forget.working_memory import held_resolve, take_back
from memproc.services.messages import messages_delete
from memproc.services.purge import resource_purge
from memproc.services.threads import thread_delete

__all__ = ["forget", "held_decide"]

Receipt = models.ForgetReceipt


def forget(
    *,
    resource_id: str,
    message_ids: Sequence[str] | None = None,
    thread_id: str | None = None,
    cascade: bool = True,
    actor: Any = None,
) -> models.ForgetReceipt:
    """Forgets `message_ids` (ids within the resource), or the thread `thread_id`, or, with neither,
    everything stored about the resource. One transaction; files go after it commits. Unknown ids
    or an unknown thread are a ValidationError and nothing is forgotten. Without `cascade`, only the
    messages (with their embeddings and unused files) go, as `Memory.delete_messages` does."""
    if not resource_id:
        raise ValidationError("forget needs the resource_id")
    if message_ids is not None and thread_id is not None:
        raise ValidationError("forget takes message_ids or thread_id, not both")
    if isinstance(message_ids, str):
        raise ValidationError("forget(message_ids=...) takes a list of ids, not one string")
    if message_ids is not None and not message_ids:
        raise ValidationError("forget(message_ids=...) needs at least one id")
    with transaction.atomic(using=memproc_db()):
        if message_ids is not None:
            return _messages(resource_id, list(dict.fromkeys(message_ids)), cascade=cascade, actor=actor)
        if thread_id is not None:
            return _thread(resource_id, thread_id, cascade=cascade, actor=actor)
        return _resource(resource_id, actor=actor)


def held_decide(*, receipt: models.ForgetReceipt, keep_current: bool, actor: Any = None) -> bool:
    """An operator's decision on a receipt's held working memory (see `held_resolve`); the receipt
    is done once every held change is resolved. False when one changed meanwhile (decide again)."""
    with transaction.atomic(using=memproc_db()):
        receipt = Receipt.objects.select_for_update().get(pk=receipt.pk)
        if not receipt.held:
            return True
        resolved = held_resolve(held=receipt.held, keep_current=keep_current, actor=actor)
        if resolved < len(receipt.held):
            return False
        receipt.held, receipt.status = [], Receipt.Status.DONE
        receipt.save(update_fields=["held", "status"])
    return True


def _messages(resource_id: str, ids: list[str], *, cascade: bool, actor: Any) -> models.ForgetReceipt:
    keys = message_keys(resource_id, ids)
    rows = list(models.Message.objects.filter(pk__in=keys).values("pk", "public_id", "thread_id", "text"))
    missing = sorted(set(ids) - {row["public_id"] for row in rows})
    if missing:
        raise ValidationError(f"No stored message with id {', '.join(map(repr, missing))} in this resource")
    threads = sorted({row["thread_id"] for row in rows})
    receipt = _receipt(
        resource_id,
        Receipt.Scope.MESSAGES,
        texts=[row["text"] for row in rows],
        keys=keys,
        attachments=models.Attachment.objects.filter(message_id__in=keys),
        cascade=cascade,
        actor=actor,
    )
    counts: dict[str, int] = {}
    if cascade:
        back = take_back(resource_id=resource_id, thread_keys=threads, forgotten=keys, actor=actor)
        counts["working_memory_reverted"], receipt.held = back.reverted, back.held
        public = {row["public_id"] for row in rows}
        counts["turn_records_scrubbed"] = _records_scrub(resource_id, public)
        counts["idempotency_records"] = _kept_answers(resource_id, threads).delete()[0]
    counts["summaries"] = models.ThreadSummary.objects.filter(thread_id__in=threads).count()
    counts["messages"] = messages_delete(message_keys=keys)
    counts["summaries"] -= models.ThreadSummary.objects.filter(thread_id__in=threads).count()
    return _done(receipt, counts)


def _thread(resource_id: str, thread_id: str, *, cascade: bool, actor: Any) -> models.ForgetReceipt:
    key = thread_key(resource_id, thread_id)
    thread = models.Thread.objects.filter(pk=key).first()
    if thread is None:
        raise ValidationError(f"No thread {thread_id!r} in this resource")
    rows = list(thread.messages.values_list("pk", "text"))
    keys = [pk for pk, _ in rows]
    receipt = _receipt(
        resource_id,
        Receipt.Scope.THREAD,
        texts=[text for _, text in rows] + [thread.title, thread.working_memory],
        keys=keys,
        attachments=models.Attachment.objects.filter(message_id__in=keys),
        cascade=cascade,
        actor=actor,
    )
    receipt.thread_id = thread_id
    counts = {"messages": len(keys)}
    if cascade:
        back = take_back(
            resource_id=resource_id, thread_keys=[key], forgotten=keys, whole_threads=[key], actor=actor
        )
        counts["working_memory_reverted"], receipt.held = back.reverted, back.held
        counts["working_memory_revisions"] = models.WorkingMemoryRevision.objects.filter(
            scope=models.WorkingMemoryRevision.Scope.THREAD, key=key
        ).delete()[0]
        counts["turn_records"] = models.TurnRecord.objects.filter(
            resource_id__in=[resource_id, ""], thread_id=thread_id
        ).delete()[0]
        counts["tripwire_logs"] = models.TripwireLog.objects.filter(
            resource_id__in=[resource_id, ""], thread_id=thread_id
        ).delete()[0]
    thread_delete(thread=thread)  # messages, embeddings, summary, unused files, kept answers
    return _done(receipt, counts)


def _resource(resource_id: str, *, actor: Any) -> models.ForgetReceipt:
    receipt = _receipt(
        resource_id,
        Receipt.Scope.RESOURCE,
        texts=[],
        keys=[],
        attachments=models.Attachment.objects.filter(resource_id=resource_id),
        cascade=True,
        actor=actor,
    )
    counts = resource_purge(resource_id=resource_id).as_dict()
    return _done(receipt, counts)


def _receipt(
    resource_id: str,
    scope: str,
    *,
    texts: Iterable[str],
    keys: list[str],
    attachments: Any,
    cascade: bool,
    actor: Any,
) -> models.ForgetReceipt:
    """The receipt, built before anything is deleted (it reads what goes), saved by `_done`."""
    salt = secrets.token_hex(8)
    return Receipt(
        resource_id=resource_id,
        scope=scope,
        cascade=cascade,
        salt=salt,
        fingerprints=fingerprints((t for t in texts if t), salt=salt),
        message_keys=key_digests(keys, salt=salt),
        files=[{"name": name, "sha256": sha} for name, sha in attachments.values_list("file", "sha256")],
        actor=actor if getattr(actor, "is_authenticated", False) else None,
    )


def _done(receipt: models.ForgetReceipt, counts: dict[str, int]) -> models.ForgetReceipt:
    receipt.counts = counts
    receipt.status = Receipt.Status.REVIEW if receipt.held else Receipt.Status.DONE
    receipt.save(using=memproc_db())
    return receipt


def _kept_answers(resource_id: str, thread_keys: Iterable[str]) -> Any:
    public = [public_thread_id(k) for k in thread_keys]
    return models.IdempotencyRecord.objects.filter(resource_id=resource_id, thread_id__in=public)


def _records_scrub(resource_id: str, forgotten: set[str]) -> int:
    """Takes the forgotten ids out of the resource's turn records (saved ids, the manifest's history
    and recalled lists: recall crosses threads); the records stay, the operators' account of turns."""
    changed = 0
    records = models.TurnRecord.objects.filter(resource_id=resource_id)
    for record in records.only("pk", "thread_id", "message_ids", "manifest"):
        manifest = dict(record.manifest or {})
        before = (list(record.message_ids or []), manifest.get("history"), manifest.get("recalled"))
        record.message_ids = [i for i in record.message_ids or [] if i not in forgotten]
        if isinstance(manifest.get("history"), list):
            manifest["history"] = [i for i in manifest["history"] if i not in forgotten]
        if isinstance(manifest.get("recalled"), list):
            manifest["recalled"] = [
                r for r in manifest["recalled"] if not (isinstance(r, dict) and r.get("id") in forgotten)
            ]
        if before != (record.message_ids, manifest.get("history"), manifest.get("recalled")):
            record.manifest = manifest
            record.save(update_fields=["message_ids", "manifest"])
            changed += 1
    return changed
