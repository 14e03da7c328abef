"""Forget messages, a thread or a whole resource, with what was derived from them; or prove that
earlier forgets held.

`python manage.py memproc_forget user-42 --message m-1 --message m-2 --yes` forgets two messages;
`python manage.py memproc_forget user-42 --thread t-9 --yes` a thread; `... user-42 --all --yes` the
whole resource. `python manage.py memproc_forget --verify user-42` checks every forget of the
resource against every memproc table, the vectors and stored files, and exits with status 1 if
anything forgotten is still held.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from memproc.exceptions import ValidationError
from memproc.models import ForgetReceipt
from memproc.services.forget import forget
from memproc.services.forget.verify import verify


class Command(BaseCommand):
    help = (
        "Forget a resource's messages (--message), a thread (--thread) or all of it (--all), with "
        "what was derived from them; or, with --verify, prove that its earlier forgets held."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("resource_id", help="the resource (user, account)")
        what = parser.add_mutually_exclusive_group()
        what.add_argument("--message", action="append", dest="messages", help="a message id (repeatable)")
        what.add_argument("--thread", help="a thread id")
        what.add_argument("--all", action="store_true", help="everything stored about the resource")
        what.add_argument("--verify", action="store_true", help="check the resource's earlier forgets")
        parser.add_argument(
            "--no-cascade", action="store_true", help="only the messages, not what was derived from them"
        )
        parser.add_argument("--yes", action="store_true", help="really forget (default: say what would go)")

    def handle(self, *args: Any, **options: Any) -> None:
        resource_id = options["resource_id"]
        if options["verify"]:
            self.handle_verify(resource_id)
            return
        if not (options["messages"] or options["thread"] or options["all"]):
            raise CommandError("Say what to forget: --message ID, --thread ID or --all (or give --verify).")
        what = (
            f"messages {', '.join(options['messages'])}"
            if options["messages"]
            else f"thread {options['thread']}"
            if options["thread"]
            else "everything"
        )
        if not options["yes"]:
            self.stdout.write(
                self.style.WARNING(f"Would forget {what} of {resource_id!r}. Add --yes to do it.")
            )
            return
        try:
            receipt = forget(
                resource_id=resource_id,
                message_ids=options["messages"],
                thread_id=options["thread"],
                cascade=not options["no_cascade"],
            )
        except ValidationError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"Forgot {what} of {resource_id!r} (receipt {receipt.pk}):")
        for key, value in sorted(receipt.counts.items()):
            self.stdout.write(f"  {value:>8}  {key.replace('_', ' ')}")
        if receipt.status == ForgetReceipt.Status.REVIEW:
            self.stdout.write(
                self.style.WARNING(
                    "Working memory a later change built on is held for review: decide in the admin "
                    "(Forget receipts), then run --verify."
                )
            )

    def handle_verify(self, resource_id: str) -> None:
        count = ForgetReceipt.objects.filter(resource_id=resource_id).count()
        if not count:
            raise CommandError(f"No forget is recorded for resource {resource_id!r}.")
        findings = verify(resource_id=resource_id)
        for finding in findings:
            self.stdout.write(self.style.ERROR(str(finding)))
        if findings:
            raise CommandError(f"{len(findings)} places still hold forgotten data of {resource_id!r}.")
        self.stdout.write(
            self.style.SUCCESS(
                f"Verified {count} forget(s) of {resource_id!r}: no table, vector or stored file holds them."
            )
        )
