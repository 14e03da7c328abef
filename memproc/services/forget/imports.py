"""An export taken before a forget must not bring the forgotten back: its rows are left out on import."""

from __future__ import annotations

from typing import Any

from memproc import models
from memproc.models import public_thread_id
from memproc.services.forget.fingerprints import key_digests

Receipt = models.ForgetReceipt


def forgotten_rows_drop(rows: Any) -> int:
    """Drops from an import's rows (memproc.services.export.reader.Rows) the messages, threads and
    what came from them that the resource's receipts say were forgotten: their attachments, the
    working-memory revisions their turns wrote, the summaries of threads that held them (they fold
    again), and a forgotten thread's turn records and tripwire logs. Returns how many messages it
    dropped. A forgotten resource is refused (ValidationError): restoring it is a decision to make
    by deleting its receipt first."""
    from memproc.exceptions import ValidationError

    resource_id = rows.resource.pk
    receipts = list(
        Receipt.objects.filter(resource_id=resource_id).values("scope", "thread_id", "salt", "message_keys")
    )
    if not receipts:
        return 0
    if any(r["scope"] == Receipt.Scope.RESOURCE for r in receipts):
        raise ValidationError(
            f"Resource {resource_id!r} was forgotten; delete its forget receipt to import it again"
        )
    threads = {r["thread_id"] for r in receipts if r["scope"] == Receipt.Scope.THREAD}
    digests = [(r["salt"], set(r["message_keys"])) for r in receipts if r["message_keys"]]

    def forgotten(key: str) -> bool:
        return any(key_digests([key], salt=salt)[0] in found for salt, found in digests)

    dropped = {m.pk for m in rows.messages if public_thread_id(m.thread_id) in threads or forgotten(m.pk)}
    touched = {m.thread_id for m in rows.messages if m.pk in dropped}
    rows.messages = [m for m in rows.messages if m.pk not in dropped]
    rows.threads = [t for t in rows.threads if t.public_id not in threads]
    rows.attachments = [a for a in rows.attachments if a.message_id not in dropped]
    rows.summaries = [s for s in rows.summaries if s.thread_id not in touched]
    rows.revisions = [
        r
        for r in rows.revisions
        if not dropped.intersection(r.message_ids or ())
        and public_thread_id(r.thread_id) not in threads
        and not (r.scope == models.WorkingMemoryRevision.Scope.THREAD and public_thread_id(r.key) in threads)
    ]
    rows.turns = [t for t in rows.turns if t.thread_id not in threads]
    rows.tripwires = [t for t in rows.tripwires if t.thread_id not in threads]
    return len(dropped)
