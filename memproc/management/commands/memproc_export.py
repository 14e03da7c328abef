"""Export everything memproc stores for one resource.

    python manage.py memproc_export --resource user-42 > user-42.json
    python manage.py memproc_export --resource user-42 --with-files user-42.zip

The JSON (format "memproc.export", version 1) goes to stdout; `--with-files` writes a zip of it and
the attachment files instead. `memproc_import` reads either back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from memproc.services.export import resource_export_chunks, resource_export_zip


class Command(BaseCommand):
    help = (
        "Export a resource's threads, messages, working memory (with its revisions), turn records, "
        "tripwire logs and attachments as JSON on stdout, or with --with-files as a zip that also holds "
        "the attachment files. Embeddings are not exported: memproc_import rebuilds them."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--resource", required=True, metavar="RESOURCE_ID", help="the resource to export")
        parser.add_argument(
            "--with-files", metavar="OUT.zip", help="write a zip with the JSON and the attachment files"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        resource_id = options["resource"]
        try:
            if options["with_files"]:
                target = Path(options["with_files"])
                with target.open("wb") as handle:
                    counts = resource_export_zip(resource_id=resource_id, target=handle)
                self.stderr.write(f"Wrote {target} with {counts['attachments']} attachment file(s).")
                if counts["missing"]:
                    self.stderr.write(
                        self.style.WARNING(f"{counts['missing']} attachment file(s) could not be read.")
                    )
                return
            for piece in resource_export_chunks(resource_id=resource_id):
                self.stdout.write(piece, ending="")
            self.stdout.write("")
        except LookupError as exc:
            raise CommandError(str(exc.args[0] if exc.args else exc)) from exc
