"""Import what `memproc_export` wrote, into this database (the same one, or another site's).

    python manage.py memproc_import user-42.json
    python manage.py memproc_import user-42.zip
    python manage.py memproc_export --resource user-42 | python manage.py memproc_import -

Importing twice changes nothing; ids already used differently here are listed and nothing is
imported. Embeddings are rebuilt in the background after the import (`--no-embed`: not at all).
"""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from memproc.exceptions import ValidationError
from memproc.services.export import ImportConflict, archive_read, resource_import


class Command(BaseCommand):
    help = (
        "Import a resource exported with memproc_export (JSON, or a zip with the attachment files; - "
        "reads stdin). Idempotent; conflicts on existing ids are listed and nothing is imported."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("file", help="the export: a .json or .zip file, or - for stdin")
        parser.add_argument("--no-embed", action="store_true", help="do not rebuild the embeddings")

    def handle(self, *args: Any, **options: Any) -> None:
        path = options["file"]
        try:
            document, files = archive_read(sys.stdin.buffer if path == "-" else path)
            report = resource_import(document=document, files=files, embed=not options["no_embed"])
        except ImportConflict as exc:
            for conflict in exc.conflicts:
                self.stderr.write(f"  conflict: {conflict}")
            raise CommandError(f"{len(exc.conflicts)} conflict(s); nothing was imported.") from exc
        except (ValidationError, OSError) as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"Imported resource {report.resource_id!r}:")
        for kind, created in report.created.items():
            existing = report.existing.get(kind, 0)
            self.stdout.write(f"  {kind}: {created} new, {existing} already stored")
        if report.missing_files:
            self.stdout.write(
                self.style.WARNING(
                    f"{len(report.missing_files)} attachment(s) skipped, their files were not in the "
                    f"export nor in this storage: {', '.join(report.missing_files)}"
                )
            )
        if report.unknown_users:
            names = ", ".join(sorted(set(report.unknown_users)))
            self.stdout.write(self.style.WARNING(f"Users not found here (stored as no user): {names}"))
        if report.embedding_jobs:
            self.stdout.write(f"Embeddings are being rebuilt ({report.embedding_jobs} background job(s)).")
        self.stdout.write(self.style.SUCCESS("Done."))
