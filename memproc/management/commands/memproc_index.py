"""Show or build the HNSW index of each embedder (PostgreSQL with pgvector).

    python manage.py memproc_index --status   # per embedder: rows, index, state, size
    python manage.py memproc_index --build    # build the missing or invalid ones now, CONCURRENTLY

An index is otherwise built by the background job `memproc.build_index` once its embedder has
MEMPROC["HNSW_BUILD_MIN_ROWS"] rows; until it is valid, searches are exact. `--build` builds every
embedder's, whatever its size. On another database there is no index to show or build.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import connections, router
from django.template.defaultfilters import filesizeformat

from memproc.exceptions import ConfigurationError
from memproc.fields import is_postgres
from memproc.models import MessageEmbedding
from memproc.vectors.pgvector_maintenance import build_indexes, index_status


class Command(BaseCommand):
    help = (
        "PostgreSQL: show each embedder's HNSW index (rows, name, state: none, building, invalid or "
        "valid, size), or build the missing and invalid ones CONCURRENTLY."
    )

    def add_arguments(self, parser: Any) -> None:
        action = parser.add_mutually_exclusive_group(required=True)
        action.add_argument("--status", action="store_true", help="show each embedder's index")
        action.add_argument(
            "--build",
            action="store_true",
            help="build every embedder's missing or invalid index now (writes go on), then show them",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        connection = connections[router.db_for_write(MessageEmbedding)]
        if not is_postgres(connection):
            self.stdout.write(
                f"Nothing to do: HNSW indexes exist only on PostgreSQL with pgvector (this database is "
                f"{connection.vendor}; searches there are exact)."
            )
            return
        if options["build"]:
            self._build()
        self._status()

    def _build(self) -> None:
        try:
            done = build_indexes()
        except ConfigurationError as exc:
            raise CommandError(str(exc)) from exc
        for name in done.built:
            self.stdout.write(f"Built {name}.")
        for name in done.dropped:
            self.stdout.write(f"Dropped {name} (the other index type).")
        for name, error in done.failed:
            self.stderr.write(f"Could not build {name}: {error}")
        if done.failed:
            self._status()
            raise CommandError(f"{len(done.built)} index(es) built, {len(done.failed)} failed.")
        self.stdout.write(self.style.SUCCESS(f"{len(done.built)} index(es) built."))

    def _status(self) -> None:
        statuses = index_status()
        if not statuses:
            self.stdout.write("No embeddings stored: no index to build.")
            return
        header = ("embedder", "dimensions", "rows", "index", "state", "size")
        lines = [header] + [
            (
                s.model,
                str(s.dimensions),
                str(s.rows),
                s.name,
                s.state,
                "-" if s.size is None else filesizeformat(s.size),
            )
            for s in statuses
        ]
        widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
        for line in lines:
            self.stdout.write(
                "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
            )
