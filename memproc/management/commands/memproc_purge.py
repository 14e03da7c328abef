"""Delete everything memproc stores about one resource, or what RETENTION says has expired; a dry
run unless `--yes` is given.

`python manage.py memproc_purge user-42` prints what would be deleted;
`python manage.py memproc_purge user-42 --yes` deletes it;
`python manage.py memproc_purge --expired --yes` deletes expired data (run it daily from cron, or
schedule the `memproc.purge_expired` task).
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from memproc.services.purge import expired_purge, resource_purge

LABELS = {
    "threads": "threads",
    "messages": "messages",
    "embeddings": "embeddings",
    "working_memory_revisions": "working memory revisions",
    "attachments": "attachments (and their files)",
    "turn_records": "turn records",
    "tripwire_logs": "tripwire logs",
    "idempotency_records": "answers kept for Idempotency-Key retries",
    "pending_tool_calls": "tool calls waiting for a decision (suspended turns)",
    "resource": "resource row (with its working memory)",
}
EXPIRED_LABELS = {
    "messages": "messages (with their embeddings and the attachment files only they used)",
    "orphan_attachments": "attachments no message holds (and their files)",
    "orphan_files": "attachment files no attachment row references (left by a killed turn)",
    "tripwire_logs": "tripwire logs",
    "turn_records": "turn records",
}


class Command(BaseCommand):
    help = (
        "Delete a resource's threads, messages, embeddings, working memory, attachments, tripwire "
        "logs and kept Idempotency-Key answers. Without --yes it only prints what would be deleted."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("resource_id", nargs="?", help="the resource (user, account) whose data goes")
        parser.add_argument(
            "--expired", action="store_true", help="delete what the RETENTION setting says has expired"
        )
        parser.add_argument("--yes", action="store_true", help="really delete (default: dry run)")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["expired"] == bool(options["resource_id"]):
            raise CommandError("Name a resource, or give --expired (not both).")
        if options["expired"]:
            self.handle_expired(yes=options["yes"])
            return
        resource_id = options["resource_id"]
        counts = resource_purge(resource_id=resource_id, dry_run=not options["yes"])
        if not counts.total:
            self.stdout.write(f"Nothing is stored for resource {resource_id!r}.")
            return
        heading = "Deleted" if options["yes"] else "Would delete"
        self.stdout.write(f"{heading} for resource {resource_id!r}:")
        for key, value in counts.as_dict().items():
            self.stdout.write(f"  {value:>8}  {LABELS[key]}")
        if options["yes"]:
            self.stdout.write(self.style.SUCCESS("Done."))
        else:
            self.stdout.write(self.style.WARNING("Dry run: nothing was deleted. Add --yes to delete."))

    def handle_expired(self, *, yes: bool) -> None:
        counts = expired_purge(dry_run=not yes)
        heading = "Deleted" if yes else "Would delete"
        self.stdout.write(f"{heading} expired data:")
        for key, value in counts.items():
            self.stdout.write(f"  {value:>8}  {EXPIRED_LABELS.get(key, key)}")
        if not yes:
            self.stdout.write(self.style.WARNING("Dry run: nothing was deleted. Add --yes to delete."))
