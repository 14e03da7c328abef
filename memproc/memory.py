"""Memory: the configuration that adds memory processors to an agent, and the API over stored data.

Services, selectors and vector stores are imported where they are used: they load the ORM, and a
Memory (like an Agent) may be built in a module imported before Django is set up.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from functools import partial
from typing import Any

from django.db import transaction

from memproc.conf import settings
from memproc.embedders import get_embedder
from memproc.exceptions import ConfigurationError, ValidationError
from memproc.messages import Message, MessageInput, to_messages
from memproc.processors.attachments import AttachmentUploader
from memproc.processors.base import ProcessorContext
from memproc.processors.message_history import MessageHistory
from memproc.processors.semantic_recall import SemanticRecall
from memproc.processors.working_memory import WorkingMemory

logger = logging.getLogger(__name__)

RECALL_DEFAULTS = {"top_k": 4, "message_range": 1, "scope": "resource", "threshold": None}
WORKING_MEMORY_DEFAULTS = {"scope": "resource", "template": None, "schema": None}
CALL_OPTIONS = frozenset({"read_only", "last_messages", "semantic_recall", "working_memory"})


class Memory:
    """Which memory an agent has (history, semantic recall, working memory) and the programmatic API
    over threads, messages and working memory. Defaults follow Mastra's."""

    def __init__(
        self,
        *,
        last_messages: int | bool = 10,
        semantic_recall: bool | dict[str, Any] = False,
        working_memory: bool | dict[str, Any] = False,
        embedder: Any = None,
        vector_store: Any = None,
        generate_title: bool = False,
        read_only: bool = False,
    ) -> None:
        if last_messages is True or (
            not isinstance(last_messages, bool) and (not isinstance(last_messages, int) or last_messages < 0)
        ):
            raise ConfigurationError("Memory(last_messages=...) must be an integer >= 0 or False")
        self.last_messages = last_messages
        self.recall_options = _options(semantic_recall, RECALL_DEFAULTS, "semantic_recall")
        self.working_memory_options = _options(working_memory, WORKING_MEMORY_DEFAULTS, "working_memory")
        self.embedder = embedder
        self.vector_store = vector_store
        self.generate_title = generate_title
        self.read_only = read_only
        self._importing = False
        self._processors = self._build_processors()

    def with_options(self, options: dict[str, Any]) -> Memory:
        """This Memory with one call's overrides (rule 22): `read_only`, `last_messages`,
        `semantic_recall` and `working_memory` (a dict merges into this Memory's options)."""
        if not isinstance(options, dict):
            raise ValidationError("memory_options must be a dict")
        unknown = set(options) - CALL_OPTIONS
        if unknown:
            raise ValidationError(
                f"memory_options has unknown keys: {', '.join(sorted(unknown))}; "
                f"expected some of {', '.join(sorted(CALL_OPTIONS))}"
            )
        try:
            return Memory(
                last_messages=options.get("last_messages", self.last_messages),
                semantic_recall=_merged(options, "semantic_recall", self.recall_options),
                working_memory=_merged(options, "working_memory", self.working_memory_options),
                embedder=self.embedder,
                vector_store=self.vector_store,
                generate_title=self.generate_title,
                read_only=bool(options.get("read_only", self.read_only)),
            )
        except ConfigurationError as exc:
            raise ValidationError(f"memory_options: {exc}") from exc

    @property
    def uses_semantic_recall(self) -> bool:
        return self.recall_options is not None

    def _build_processors(self) -> dict[str, Any]:

        built: dict[str, Any] = {}
        if self.last_messages is not False and not self.read_only:
            # Only memory that saves messages needs files offloaded: a stored message never holds bytes.
            built["attachment-uploader"] = AttachmentUploader()
        if self.working_memory_options:
            wm = self.working_memory_options
            built["working-memory"] = WorkingMemory(
                scope=wm["scope"],
                template=wm.get("template"),
                schema=wm.get("schema"),
                read_only=self.read_only,
            )
        if self.last_messages is not False:
            built["message-history"] = MessageHistory(int(self.last_messages), read_only=self.read_only)
        if self.recall_options:
            built["semantic-recall"] = SemanticRecall(
                embedder=self.embedder, vector_store=self.vector_store, **self.recall_options
            )
        return built

    def processors(self) -> tuple[list[Any], list[Any]]:
        """(input, output) memory processors in pipeline order (DESIGN §2 rules 1-2)."""
        p = self._processors
        order_in = ["attachment-uploader", "working-memory", "message-history", "semantic-recall"]
        order_out = ["semantic-recall", "message-history"]
        return [p[i] for i in order_in if i in p], [p[i] for i in order_out if i in p]

    @property
    def working_memory_processor(self) -> Any:
        return self._processors.get("working-memory")

    # --- threads ---------------------------------------------------------------------------------

    def create_thread(
        self,
        *,
        resource_id: str,
        thread_id: str | None = None,
        title: str = "",
        metadata: dict[str, Any] | None = None,
    ) -> Any:
        from memproc.services.threads import thread_create

        return thread_create(resource_id=resource_id, thread_id=thread_id, title=title, metadata=metadata)

    def get_thread(self, thread_id: str) -> Any:
        from memproc.selectors import thread_get

        return thread_get(thread_id=thread_id)

    def list_threads(self, *, resource_id: str) -> list[Any]:
        from memproc.selectors import threads_for_resources

        return list(threads_for_resources(resource_ids=[resource_id]))

    def update_thread(
        self, thread_id: str, *, title: str | None = None, metadata: dict[str, Any] | None = None
    ) -> Any:
        from memproc.services.threads import thread_update

        return thread_update(thread=self._thread(thread_id), title=title, metadata=metadata)

    def delete_thread(self, thread_id: str) -> None:
        from memproc.services.threads import thread_delete

        thread_delete(thread=self._thread(thread_id))

    def clone_thread(
        self, thread_id: str, *, new_thread_id: str | None = None, title: str | None = None
    ) -> Any:
        from memproc.services.threads import thread_clone

        return thread_clone(thread=self._thread(thread_id), new_thread_id=new_thread_id, title=title)

    def _thread(self, thread_id: str) -> Any:
        thread = self.get_thread(thread_id)
        if thread is None:
            raise LookupError(f"No thread with id {thread_id!r}")
        return thread

    # --- messages --------------------------------------------------------------------------------

    def save_messages(
        self, messages: MessageInput, *, thread_id: str, resource_id: str, embed: bool | None = None
    ) -> list[Message]:
        """Saves messages at the end of a thread; embeds them (after commit) when recall is on, with
        this Memory's embedder into this Memory's vector store (each None: the setting's).

        With BACKGROUND="celery" the embedding is a task, which carries JSON only: an embedder or a
        store given as a dotted path (or a `{"CLASS": ..., "OPTIONS": ...}` dict) travels with it, but
        one given as an object cannot, so the embedding then runs in this process after commit
        instead (errors logged, not retried), rather than on a worker that would use the settings'.
        """
        from memproc import background
        from memproc.services.recall import sources_embed, sources_for
        from memproc.services.threads import messages_save_with_files

        values = to_messages(messages)
        # Inline files are offloaded to the attachment storage, as in a turn: rows never hold bytes.
        saved = messages_save_with_files(thread_id=thread_id, resource_id=resource_id, messages=values)
        if (self.uses_semantic_recall if embed is None else embed) and saved:
            sources = sources_for(saved, thread_id=thread_id, resource_id=resource_id)

            def embed_here() -> None:
                sources_embed(sources=sources, embedder=self.embedder, vector_store=self.vector_store)

            if self._importing:
                # In this process, so the rows land while the index is held back; errors reach the caller.
                transaction.on_commit(embed_here)
                return saved
            backends = {"embedder": self.embedder, "vector_store": self.vector_store}
            if settings.BACKGROUND == "celery" and not all(map(_travels, backends.values())):
                transaction.on_commit(partial(_embed_logged, embed_here))
                return saved
            background.enqueue(
                "memproc.embed_messages",
                kwargs={
                    "message_ids": [s.message_id for s in sources],
                    **{name: spec for name, spec in backends.items() if spec is not None},
                },
                inline=embed_here,
            )
        return saved

    @contextmanager
    def bulk_import(self) -> Iterator[None]:
        """A block for loading many messages (history from another system, a backfill).

        Inside it `save_messages` embeds in this process (not on a worker) and the vector store holds
        its index back, building it once at the end: on PostgreSQL that is pgvector's HNSW index, which
        costs milliseconds per row to maintain and a fraction of that to build. Searches stay correct
        meanwhile (exact). Start it outside a transaction. Without semantic recall it changes nothing.
        """
        if not self.uses_semantic_recall or self._importing:
            yield
            return
        from memproc.vectors import get_vector_store

        embedder = get_embedder(self.embedder)
        store = get_vector_store(self.vector_store)
        defer = getattr(store, "deferred_index", None)  # a custom store may keep no index
        with defer(embedder.id, int(embedder.dimensions)) if defer else nullcontext():
            self._importing = True
            try:
                yield
            finally:
                self._importing = False

    def delete_messages(self, message_ids: Sequence[str]) -> int:
        from memproc.services.threads import messages_delete

        return messages_delete(message_ids=message_ids)

    def recall(
        self,
        *,
        thread_id: str,
        resource_id: str | None = None,
        query: str | None = None,
        last_messages: int | None = None,
    ) -> list[Message]:
        """History (and, with a query and recall on, related messages), in time order."""
        from memproc.selectors import messages_recent, thread_owner
        from memproc.services.store import DjangoMemoryStore

        limit = int((self.last_messages if last_messages is None else last_messages) or 0)
        # The thread's last sequence bounds the window to `limit` rows whatever the planner's statistics
        # say (after a bulk load PostgreSQL otherwise scanned and sorted the whole thread: 12 ms at 10k).
        owner = thread_owner(thread_id=thread_id) if limit else None
        history = messages_recent(thread_id=thread_id, limit=limit, last_sequence=owner[2] if owner else None)
        if not query or not self.recall_options:
            return history
        recall = self._processors["semantic-recall"]

        query_message = Message.create("user", query)
        ctx = ProcessorContext(
            processor_id=recall.id,
            messages=(*history, query_message),
            thread_id=thread_id,
            resource_id=resource_id,
            store=DjangoMemoryStore(),
            loaded_ids=frozenset(m.id for m in history),
        )
        found = recall.recall(ctx, query) or ([], [])
        merged = {m.id: m for m in [*history, *found[0], *found[1]]}
        return sorted(merged.values(), key=lambda m: (m.created_at is None, m.created_at))

    # --- working memory --------------------------------------------------------------------------

    def get_working_memory(self, *, thread_id: str | None = None, resource_id: str | None = None) -> str:
        from memproc.selectors import working_memory_get

        scope, key = self._working_memory_key(thread_id, resource_id)
        return working_memory_get(scope=scope, key=key)[0]

    def update_working_memory(
        self,
        value: Any,
        *,
        thread_id: str | None = None,
        resource_id: str | None = None,
        source: str = "code",
        actor: Any = None,
        replace: bool = False,
    ) -> str:
        from memproc.services.working_memory import working_memory_update

        wm = self.working_memory_processor
        if wm is None:
            raise ConfigurationError("This Memory has no working memory")
        scope, key = self._working_memory_key(thread_id, resource_id)
        text, _ = working_memory_update(
            scope=scope,
            key=key,
            value=value,
            source=source,
            mode=wm.mode,
            template=wm.template,
            schema=wm.schema,
            actor=actor,
            replace=replace,
        )
        return text

    def _working_memory_key(self, thread_id: str | None, resource_id: str | None) -> tuple[str, str]:
        wm = self.working_memory_processor
        scope = wm.scope if wm is not None else ("thread" if thread_id else "resource")
        key = thread_id if scope == "thread" else resource_id
        if not key:
            raise ValidationError(f"Working memory of scope {scope!r} needs a {scope}_id")
        return scope, key


def _travels(spec: Any) -> bool:
    """Whether a back-end spec can be sent to a Celery worker (JSON) and rebuilt there."""
    if spec is None or isinstance(spec, str):
        return True
    if not isinstance(spec, dict):
        return False
    try:
        json.dumps(spec)
    except (TypeError, ValueError):
        return False
    return True


def _embed_logged(embed: Callable[[], Any]) -> None:
    try:
        embed()
    except Exception:
        logger.exception("memproc: embedding saved messages in this process failed; they stay unembedded")


def _merged(options: dict[str, Any], name: str, current: dict[str, Any] | None) -> Any:
    """A call's override of one option: True/False/None as given; a dict merges into the current."""
    if name not in options:
        return current or False
    value = options[name]
    if isinstance(value, dict) and value.get("enabled", True) is not False:
        return {**(current or {}), **value}
    return value


def _options(value: bool | dict[str, Any], defaults: dict[str, Any], name: str) -> dict[str, Any] | None:
    """True, False, None or a dict of options; the seed's `{"enabled": bool, ...}` form too (rule 21)."""
    if value is False or value is None:
        return None
    if value is True:
        return dict(defaults)
    if isinstance(value, dict):
        enabled = value.get("enabled", True)
        if not isinstance(enabled, bool):
            raise ConfigurationError(f"Memory({name}={{'enabled': ...}}) must be True or False")
        if not enabled:
            return None
        value = {k: v for k, v in value.items() if k != "enabled"}
        unknown = set(value) - set(defaults)
        if unknown:
            raise ConfigurationError(f"Memory({name}=...) has unknown options: {', '.join(sorted(unknown))}")
        return {**defaults, **value}
    raise ConfigurationError(f"Memory({name}=...) must be True, False or a dict")
