"""Import what `memproc_export` wrote, into this database (the same one, or another site's).

    python manage.py memproc_import user-42.json
    python manage.py memproc_import user-42.zip
    python manage.py memproc_export --resource user-42 | python manage.py memproc_import -

Importing twice changes nothing; ids already used differently here are listed and nothing is
imported. Embeddings are rebuilt in the background after the import (`--no-embed`: not at all).

An export is untrusted input: it is checked as the API checks requests (no system messages, no
message larger than a request, parts of the right shape) and read within `ImportLimits`
(`--max-bytes`, `--max-document-bytes`, `--max-files`); anything refused is an error and nothing is imported.
"""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import DataError

from memproc.exceptions import ValidationError
from memproc.services.export import (
    ImportConflict,
    ImportLimits,
    archive_read,
    resource_import,
)


class Command(BaseCommand):
    help = (
        "Import a resource exported with memproc_export (JSON, or a zip with the attachment files; - "
        "reads stdin). Idempotent; conflicts on existing ids are listed and nothing is imported."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("file", help="the export: a .json or .zip file, or - for stdin")
        parser.add_argument("--no-embed", action="store_true", help="do not rebuild the embeddings")
        parser.add_argument(
            "--max-bytes",
            type=int,
            default=ImportLimits.max_bytes,
            help="the most bytes read: the export, and all its zip inflates to (default: 1 GiB)",
        )
        parser.add_argument(
            "--max-document-bytes",
            type=int,
            default=ImportLimits.max_document_bytes,
            help="the largest JSON document read, parsed whole into memory (default: 256 MiB)",
        )
        parser.add_argument(
            "--max-files",
            type=int,
            default=ImportLimits.max_files,
            help="the most attachment files a zip may hold (default: %(default)s)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        path = options["file"]
        limits = ImportLimits(
            max_bytes=options["max_bytes"],
            max_document_bytes=options["max_document_bytes"],
            max_files=options["max_files"],
        )
        files = None
        try:
            document, files = archive_read(sys.stdin.buffer if path == "-" else path, limits=limits)
            report = resource_import(document=document, files=files, embed=not options["no_embed"])
        except ImportConflict as exc:
            for conflict in exc.conflicts:
                self.stderr.write(f"  conflict: {conflict}")
            raise CommandError(f"{len(exc.conflicts)} conflict(s); nothing was imported.") from exc
        except (ValidationError, OSError) as exc:
            raise CommandError(f"{str(exc).rstrip('.')}; nothing was imported.") from exc
        except DataError as exc:  # a value past what this database stores: the import rolled back
            raise CommandError(f"The database refused a value ({exc}); nothing was imported.") from exc
        finally:
            if files is not None:
                files.close()
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
