"""Re-embed stored messages with a chosen embedder, in batches, resumably.

    python manage.py memproc_reindex --resource user-42 --embedder memproc.embedders.OpenAIEmbedder
    python manage.py memproc_reindex --thread support-1 --resource user-42
    python manage.py memproc_reindex --all --batch-size 500 --resume-from '2025-01-01T10:00:00+00:00|4f0c...'
    python manage.py memproc_reindex --merge-index            # PostgreSQL: move the tail into HNSW
    python manage.py memproc_reindex --build-index            # PostgreSQL: build missing HNSW indexes

Messages that already have a vector from the embedder are skipped, so running it again is cheap and
an interrupted run loses nothing: it prints the position to pass to `--resume-from`.
"""

from __future__ import annotations

import shlex
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from memproc import models
from memproc.agents import get_agent
from memproc.agents.embedder import recall_embedder
from memproc.embedders import get_embedder
from memproc.exceptions import ConfigurationError, ValidationError
from memproc.selectors.threads import thread_get, thread_named
from memproc.services.reindex import (
    ReindexPosition,
    embedding_index_merge,
    reindex_batches,
    reindex_pending_count,
)
from memproc.vectors.pgvector_maintenance import build_indexes


class Command(BaseCommand):
    help = (
        "Embed the messages of a thread, a resource or everything with a chosen embedder, in batches "
        "(messages that already have a vector from it are skipped). Shows a progress bar on stderr and, "
        "if stopped, the position to pass to --resume-from."
    )

    def add_arguments(self, parser: Any) -> None:
        # --resource is a scope of its own, or names the resource of --thread: it stays out of the
        # group, and `_check_scope` requires a scope.
        scope = parser.add_mutually_exclusive_group()
        scope.add_argument(
            "--merge-index",
            action="store_true",
            help="PostgreSQL: mark embeddings written outside the HNSW index as indexed, in batches "
            "(of --embedder or --agent's embedder only, if given), then exit",
        )
        scope.add_argument(
            "--build-index",
            action="store_true",
            help="PostgreSQL: build the missing HNSW index of every embedder with stored vectors, in "
            "MEMPROC['HNSW_INDEX_TYPE'], CONCURRENTLY (writes go on), drop its index of the other type, "
            "then exit",
        )
        scope.add_argument(
            "--thread",
            metavar="THREAD_ID",
            help="re-embed one thread (with --resource: that resource's thread; needed when several "
            "resources have a thread of this id)",
        )
        parser.add_argument(
            "--resource",
            metavar="RESOURCE_ID",
            help="re-embed every thread of a resource, or with --thread one",
        )
        scope.add_argument("--all", action="store_true", help="re-embed every stored message")
        parser.add_argument(
            "--embedder",
            metavar="DOTTED.PATH",
            help="embedder class (default: --agent's recall embedder, else MEMPROC['EMBEDDER'])",
        )
        parser.add_argument("--agent", metavar="AGENT_ID", help="use this agent's recall embedder")
        parser.add_argument("--batch-size", type=int, default=100, help="messages per embedder call (100)")
        parser.add_argument(
            "--resume-from", metavar="POSITION", help="continue after the position an earlier run printed"
        )
        parser.add_argument("--no-progress", action="store_true", help="no progress bar")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["batch_size"] <= 0:
            raise CommandError("--batch-size must be positive")
        _check_scope(options)
        if options["merge_index"]:
            self._merge_index(options)
            return
        if options["build_index"]:
            self._build_index()
            return
        scope = self._scope(options)
        try:
            after = ReindexPosition.parse(options["resume_from"]) if options["resume_from"] else None
            embedder = get_embedder(self._embedder_spec(options))
        except (ValidationError, ConfigurationError) as exc:
            raise CommandError(str(exc)) from exc
        total = reindex_pending_count(embedder=embedder, after=after, **scope)
        self.stderr.write(f"{total} message(s) to embed with {embedder.id}.")
        bar = ProgressBar(self.stderr, total, enabled=not options["no_progress"])
        scanned = embedded = vectors = 0
        position = after
        try:
            batches = reindex_batches(
                embedder=embedder, batch_size=options["batch_size"], after=after, **scope
            )
            for batch in batches:
                scanned += batch.scanned
                embedded += batch.embedded
                vectors += batch.vectors
                position = batch.position
                bar.update(scanned)
        except (KeyboardInterrupt, Exception) as exc:
            bar.close()
            self._report_stop(exc, options, scope, position, scanned)
            code = 130 if isinstance(exc, KeyboardInterrupt) else 1
            raise CommandError(
                f"Stopped after {scanned} message(s): {_describe(exc)}", returncode=code
            ) from exc
        bar.close()
        self.stdout.write(
            self.style.SUCCESS(
                f"Embedded {embedded} message(s) ({vectors} vector(s)) with {embedder.id}; "
                f"{scanned - embedded} without text skipped."
            )
        )
        if position is not None:
            self.stdout.write(f"Last position: {position}")

    def _merge_index(self, options: dict[str, Any]) -> None:
        embedder_id = None
        if options["embedder"] or options["agent"]:
            try:
                embedder_id = get_embedder(self._embedder_spec(options)).id
            except ConfigurationError as exc:
                raise CommandError(str(exc)) from exc
        marked = embedding_index_merge(embedder_id=embedder_id, batch_size=options["batch_size"])
        self.stdout.write(self.style.SUCCESS(f"Marked {marked} embedding(s) as indexed."))

    def _build_index(self) -> None:
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
        summary = f"{len(done.built)} index(es) built, {len(done.dropped)} dropped."
        if done.failed:
            raise CommandError(f"{summary} {len(done.failed)} failed.")
        self.stdout.write(self.style.SUCCESS(summary))

    def _scope(self, options: dict[str, Any]) -> dict[str, str]:
        if options["thread"]:
            resource_id = self._thread_resource(options["thread"], options["resource"])
            return {"thread_id": options["thread"], "resource_id": resource_id}
        if options["resource"]:
            if not models.Resource.objects.filter(pk=options["resource"]).exists():
                raise CommandError(f"No resource {options['resource']!r}")
            return {"resource_id": options["resource"]}
        return {}

    @staticmethod
    def _thread_resource(thread_id: str, resource_id: str | None) -> str:
        """The resource of the thread `thread_id` (of `resource_id`, if given); a thread id names a
        thread within its resource, so without one it must be the only thread of that id."""
        if resource_id is not None:
            if thread_get(thread_id=thread_id, resource_id=resource_id) is None:
                raise CommandError(f"No thread {thread_id!r} in resource {resource_id!r}")
            return resource_id
        try:
            thread = thread_named(thread_id=thread_id)
        except ValidationError as exc:
            raise CommandError(
                f"Several resources have a thread {thread_id!r}; name one with --resource"
            ) from exc
        if thread is None:
            raise CommandError(f"No thread {thread_id!r}")
        return thread.resource_id

    def _embedder_spec(self, options: dict[str, Any]) -> Any:
        if options["embedder"]:
            return options["embedder"]
        if options["agent"]:
            try:
                agent = get_agent(options["agent"])
            except LookupError as exc:
                raise CommandError(str(exc)) from exc
            return recall_embedder(agent)
        return None

    def _report_stop(
        self, exc: BaseException, options: dict[str, Any], scope: dict[str, str], position: Any, scanned: int
    ) -> None:
        if position is None:
            self.stderr.write("Stopped before the first batch finished; nothing to resume from.")
            return
        command = ["python", "manage.py", "memproc_reindex", *_scope_args(scope)]
        if options["embedder"]:
            command += ["--embedder", options["embedder"]]
        if options["agent"]:
            command += ["--agent", options["agent"]]
        command += ["--batch-size", str(options["batch_size"]), "--resume-from", str(position)]
        self.stderr.write(f"Stopped ({_describe(exc)}) after {scanned} message(s).")
        self.stderr.write(f"Resume position: {position}")
        self.stderr.write(f"Resume with: {shlex.join(command)}")
        self.stdout.write(f"Resume position: {position}")


def _scope_args(scope: dict[str, str]) -> list[str]:
    """The arguments of a scope; a thread's always name its resource, so a resume finds the same one."""
    if "thread_id" in scope:
        return ["--thread", scope["thread_id"], "--resource", scope["resource_id"]]
    if "resource_id" in scope:
        return ["--resource", scope["resource_id"]]
    return ["--all"]


def _check_scope(options: dict[str, Any]) -> None:
    """One scope: --merge-index, --build-index, --thread (with or without --resource), --resource, or
    --all. --embedder and --agent narrow --merge-index; --build-index takes neither."""
    standalone = (
        "--merge-index" if options["merge_index"] else "--build-index" if options["build_index"] else None
    )
    if options["resource"] is not None and (standalone or options["all"]):
        raise CommandError(f"argument --resource: not allowed with argument {standalone or '--all'}")
    if options["build_index"] and (options["embedder"] or options["agent"]):
        raise CommandError("argument --build-index: builds every embedder's index; drop --embedder/--agent")
    if not (standalone or options["thread"] or options["resource"] or options["all"]):
        raise CommandError(
            "one of the arguments --merge-index --build-index --thread --resource --all is required"
        )


def _describe(exc: BaseException) -> str:
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted"
    return f"{type(exc).__name__}: {exc}"


class ProgressBar:
    """A small progress bar: redrawn in place on a terminal, a line per tenth anywhere else."""

    def __init__(self, stream: Any, total: int, *, enabled: bool = True, width: int = 30) -> None:
        self.stream = stream
        self.total = max(total, 0)
        self.enabled = enabled
        self.width = width
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self.started = time.monotonic()
        self.done = 0
        self._last_tenth = -1
        self._drawn = False

    def update(self, done: int) -> None:
        self.done = done
        if not self.enabled:
            return
        if self.tty:
            self.stream.write("\r" + self.render(), ending="")
            self.stream.flush()
            self._drawn = True
            return
        tenth = 10 if not self.total else min(10, done * 10 // self.total)
        if tenth != self._last_tenth:
            self._last_tenth = tenth
            self.stream.write(self.render())

    def render(self) -> str:
        total = max(self.total, self.done)
        fraction = self.done / total if total else 1.0
        filled = round(self.width * fraction)
        elapsed = time.monotonic() - self.started
        rate = self.done / elapsed if elapsed > 0 else 0.0
        bar = "#" * filled + "-" * (self.width - filled)
        return f"[{bar}] {self.done}/{total} ({fraction:.0%}) {rate:.0f} msg/s"

    def close(self) -> None:
        if self.enabled and self._drawn:
            self.stream.write("")
            self._drawn = False
