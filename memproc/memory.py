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

from memproc import logs
from memproc.conf import settings
from memproc.db import memproc_db
from memproc.embedders import get_embedder
from memproc.exceptions import ConfigurationError, ThreadNotFoundError, ValidationError
from memproc.messages import Message, MessageInput, to_messages
from memproc.processors.attachments import AttachmentUploader
from memproc.processors.base import ProcessorContext
from memproc.processors.compaction import CompactionOptions
from memproc.processors.message_history import MessageHistory
from memproc.processors.semantic_recall import SemanticRecall
from memproc.processors.working_memory import WorkingMemory

logger = logging.getLogger(__name__)

RECALL_DEFAULTS = {"top_k": 4, "message_range": 1, "scope": "resource", "threshold": None}
WORKING_MEMORY_DEFAULTS = {"scope": "resource", "template": None, "schema": None, "max_tokens": None}
COMPACTION_DEFAULTS = {"trigger_tokens": 6000, "keep_tokens": 2000, "model": None}
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
        history_tokens: int | None = None,
        compaction: bool | dict[str, Any] = False,
    ) -> None:
        if last_messages is True or (
            not isinstance(last_messages, bool) and (not isinstance(last_messages, int) or last_messages < 0)
        ):
            raise ConfigurationError("Memory(last_messages=...) must be an integer >= 0 or False")
        if history_tokens is not None and (
            isinstance(history_tokens, bool) or not isinstance(history_tokens, int) or history_tokens <= 0
        ):
            raise ConfigurationError("Memory(history_tokens=...) must be a positive integer or None")
        self.last_messages = last_messages
        self.history_tokens = history_tokens
        self.recall_options = _options(semantic_recall, RECALL_DEFAULTS, "semantic_recall")
        self.working_memory_options = _options(working_memory, WORKING_MEMORY_DEFAULTS, "working_memory")
        self.compaction_options = _options(compaction, COMPACTION_DEFAULTS, "compaction")
        if self.compaction_options is not None and last_messages is False:
            raise ConfigurationError("Memory(compaction=...) needs history: last_messages cannot be False")
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
                history_tokens=self.history_tokens,
                compaction=self.compaction_options or False,
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
                max_tokens=wm.get("max_tokens"),
                read_only=self.read_only,
            )
        if self.last_messages is not False:
            built["message-history"] = MessageHistory(
                int(self.last_messages),
                history_tokens=self.history_tokens,
                compaction=CompactionOptions.of(self.compaction_options),
                read_only=self.read_only,
            )
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

    def get_thread(self, thread_id: str, *, resource_id: str | None = None) -> Any:
        """The resource's thread `thread_id`, or None. A thread id names a thread within its resource:
        without `resource_id`, the one thread of that id (several is a ValidationError)."""
        from memproc.selectors.threads import thread_get, thread_named

        if resource_id is not None:
            return thread_get(thread_id=thread_id, resource_id=resource_id)
        return thread_named(thread_id=thread_id)

    def list_threads(
        self,
        *,
        resource_id: str,
        limit: int | None = None,
        cursor: str | None = None,
        order_by: str = "-updated_at",
        metadata: dict[str, Any] | None = None,
    ) -> list[Any]:
        """A resource's threads, most recently active first (`order_by`: "updated_at" or
        "created_at", "-" for newest first; the id breaks ties, so the order is stable).

        `metadata` keeps threads whose metadata holds each key with that value (a string, number,
        boolean or None). With `limit`, one page: the returned list's `next_cursor` (None on the last
        page) passed back as `cursor` gives the next, in the same `order_by`.
        """
        from memproc.selectors.threads import threads_page

        return threads_page(
            resource_ids=[resource_id], limit=limit, cursor=cursor, order_by=order_by, metadata=metadata
        )

    def update_thread(
        self,
        thread_id: str,
        *,
        title: str | None = None,
        metadata: dict[str, Any] | None = None,
        resource_id: str | None = None,
    ) -> Any:
        from memproc.services.threads import thread_update

        return thread_update(thread=self._thread(thread_id, resource_id), title=title, metadata=metadata)

    def delete_thread(self, thread_id: str, *, resource_id: str | None = None) -> None:
        from memproc.services.threads import thread_delete

        thread_delete(thread=self._thread(thread_id, resource_id))

    def clone_thread(
        self,
        thread_id: str,
        *,
        resource_id: str | None = None,
        new_thread_id: str | None = None,
        title: str | None = None,
        up_to_message_id: str | None = None,
    ) -> Any:
        """Copies a thread (messages with new ids, their embeddings, its working memory); with
        `up_to_message_id`, a branch holding the messages up to and including that one."""
        from memproc.services.threads import thread_clone

        return thread_clone(
            thread=self._thread(thread_id, resource_id),
            new_thread_id=new_thread_id,
            title=title,
            up_to_message_id=up_to_message_id,
        )

    def _thread(self, thread_id: str, resource_id: str | None) -> Any:
        thread = self.get_thread(thread_id, resource_id=resource_id)
        if thread is None:
            raise ThreadNotFoundError(f"No thread with id {thread_id!r}")
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
        from memproc.services.messages import messages_save_with_files
        from memproc.services.recall import sources_embed, sources_for

        values = to_messages(messages)
        # Inline files are offloaded to the attachment storage, as in a turn: rows never hold bytes.
        saved = messages_save_with_files(thread_id=thread_id, resource_id=resource_id, messages=values)
        if (self.uses_semantic_recall if embed is None else embed) and saved:
            sources = sources_for(saved, thread_id=thread_id, resource_id=resource_id)

            def embed_here() -> None:
                sources_embed(sources=sources, embedder=self.embedder, vector_store=self.vector_store)

            if self._importing:
                # In this process, so the rows land while the index is held back; errors reach the caller.
                transaction.on_commit(embed_here, using=memproc_db())
                return saved
            backends = {"embedder": self.embedder, "vector_store": self.vector_store}
            if settings.BACKGROUND == "celery" and not all(map(_travels, backends.values())):
                transaction.on_commit(partial(_embed_logged, embed_here), using=memproc_db())
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
        from memproc.services.messages import messages_delete

        return messages_delete(message_ids=message_ids)

    def recall(
        self,
        *,
        thread_id: str,
        resource_id: str | None = None,
        query: str | None = None,
        last_messages: int | None = None,
        date_range: Any = None,
        metadata: dict[str, Any] | None = None,
        limit: int | None = None,
    ) -> list[Message]:
        """History (and, with a query and recall on, related messages), in time order.

        Filters, for history and recalled messages alike: `date_range` keeps messages created between
        its start and end (inclusive; a `(start, end)` pair or `{"start", "end"}`, either None for
        open), `metadata` keeps messages of threads whose metadata holds each key with that value.
        `limit` is how many similar messages the search finds (this call's `top_k`).
        """
        if date_range is not None or metadata or limit is not None:
            return self._recall_filtered(
                thread_id=thread_id,
                resource_id=resource_id,
                query=query,
                last_messages=last_messages,
                date_range=date_range,
                metadata=metadata,
                limit=limit,
            )
        from memproc.selectors.threads import thread_read
        from memproc.services.store import DjangoMemoryStore

        limit = int((self.last_messages if last_messages is None else last_messages) or 0)
        key, resource_id = self._key(thread_id, resource_id)
        history: list[Message] = []
        if limit:
            owner, _, recent, _ = thread_read(thread_key=key, history=limit)
            if owner is not None and recent is not None:
                history = recent
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

    def _recall_filtered(
        self,
        *,
        thread_id: str,
        resource_id: str | None,
        query: str | None,
        last_messages: int | None,
        date_range: Any,
        metadata: dict[str, Any] | None,
        limit: int | None,
    ) -> list[Message]:
        from memproc.selectors.messages import messages_recent_filtered
        from memproc.services.store import DjangoMemoryStore
        from memproc.vectors.base import SearchFilter

        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
            raise ValidationError("recall(limit=...) must be a positive integer")
        search_filter = SearchFilter.of(date_range=date_range, thread_metadata=metadata)
        key, resource_id = self._key(thread_id, resource_id)
        history = messages_recent_filtered(
            thread_key=key,
            limit=int((self.last_messages if last_messages is None else last_messages) or 0),
            start=search_filter.start,
            end=search_filter.end,
            thread_metadata=search_filter.thread_metadata,
        )
        if not query or not self.recall_options:
            return history
        options = {**self.recall_options, **({"top_k": limit} if limit is not None else {})}
        recall = SemanticRecall(embedder=self.embedder, vector_store=self.vector_store, **options)
        ctx = ProcessorContext(
            processor_id=recall.id,
            messages=(*history, Message.create("user", query)),
            thread_id=thread_id,
            resource_id=resource_id,
            store=_FilteredSearchStore(DjangoMemoryStore(), search_filter),
            loaded_ids=frozenset(m.id for m in history),
        )
        found = recall.recall(ctx, query) or ([], [])
        # Neighbours (message_range) share their hit's thread, not always its date range.
        merged = {
            m.id: m for m in [*history, *found[0], *found[1]] if search_filter.admits_time(m.created_at)
        }
        return sorted(merged.values(), key=lambda m: (m.created_at is None, m.created_at))

    def update_messages(
        self, messages: Sequence[Message | dict[str, Any]], *, embed: bool | None = None
    ) -> list[Message]:
        """Replaces the content of stored messages: `Message` objects, or dicts with an `id` and new
        `content` (text or parts) or `parts`; a dict's `role` defaults to the stored one. Text and
        token count follow; the old embeddings are deleted and the new text embedded after commit
        (through `memproc.background`) when the messages had embeddings or this Memory uses recall
        (`embed` decides otherwise). See `messages_update` for what an edit may not change.
        """
        from memproc.selectors.messages import messages_by_id
        from memproc.services.messages import messages_update
        from memproc.services.recall import EMBEDDABLE_ROLES

        items = list(messages)
        stored = messages_by_id(ids=[_item_id(item) for item in items])
        values = [
            item
            if isinstance(item, Message)
            else to_messages({**item, "role": item.get("role") or _stored_role(stored, item)})[0]
            for item in items
        ]
        with transaction.atomic(using=memproc_db()):
            updated, unembedded = messages_update(messages=values)
            wanted = self.uses_semantic_recall if embed is None else embed
            ids = [
                m.id
                for m in updated
                if m.role in EMBEDDABLE_ROLES and m.text.strip() and (wanted or m.id in unembedded)
            ]
            if ids and embed is not False:
                self._embed_stored(ids)
        return updated

    def _embed_stored(self, message_ids: list[str]) -> None:
        """Embeds stored messages after commit: a `memproc.embed_messages` job (see save_messages for
        why backends given as objects are used in this process instead under Celery)."""
        from memproc import background
        from memproc.services.recall import messages_embed

        def embed_here() -> None:
            messages_embed(message_ids=message_ids, embedder=self.embedder, vector_store=self.vector_store)

        backends = {"embedder": self.embedder, "vector_store": self.vector_store}
        if settings.BACKGROUND == "celery" and not all(map(_travels, backends.values())):
            transaction.on_commit(partial(_embed_logged, embed_here), using=memproc_db())
            return
        background.enqueue(
            "memproc.embed_messages",
            kwargs={
                "message_ids": message_ids,
                **{name: spec for name, spec in backends.items() if spec is not None},
            },
            inline=embed_here,
        )

    # --- export ----------------------------------------------------------------------------------

    def export(self, *, resource_id: str) -> dict[str, Any]:
        """Everything stored for a resource as one versioned JSON-ready dict (see
        `memproc.services.export`): threads with their messages, working memory and its revisions,
        turn records, tripwire logs, attachments (metadata and a download URL). Embeddings are not
        exported (an import rebuilds them). A resource with nothing stored is a LookupError."""
        from memproc.services.export import resource_export

        return resource_export(resource_id=resource_id)

    # --- working memory --------------------------------------------------------------------------

    def get_working_memory(self, *, thread_id: str | None = None, resource_id: str | None = None) -> str:
        """The thread's (with `thread_id`, of `resource_id`) or the resource's working memory, by the
        working-memory scope of this Memory."""
        from memproc.selectors.threads import working_memory_get

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
            max_tokens=wm.max_tokens,
        )
        return text

    # --- thread summaries (compaction) --------------------------------------------------------------

    def get_summary(self, *, thread_id: str, resource_id: str | None = None) -> Any:
        """The thread's summary (`compaction`): a ThreadSummaryValue (`text`, `covered_sequence`,
        `version`), or None before the first fold."""
        from memproc.services.compaction.summary import thread_summary_get

        summary = thread_summary_get(thread_key=self._key(thread_id, resource_id)[0])
        return summary if summary is not None and (summary.text or summary.covered_sequence) else None

    def update_summary(
        self, text: str, *, thread_id: str, resource_id: str | None = None, actor: Any = None
    ) -> Any:
        """Replaces the thread's summary text (a correction), recorded as a revision; later folds
        build on it."""
        from memproc.services.compaction.summary import thread_summary_update

        key, resource_id = self._key(thread_id, resource_id)
        thread_summary_update(thread_key=key, text=text, actor=actor)
        return self.get_summary(thread_id=thread_id, resource_id=resource_id)

    def _key(self, thread_id: str, resource_id: str | None) -> tuple[str, str]:
        """(the thread's stored key, its resource id): a thread id names a thread within its resource;
        without `resource_id`, the one thread of that id."""
        from memproc.models import split_thread_key
        from memproc.selectors.threads import thread_key_for

        key = thread_key_for(thread_id=thread_id, resource_id=resource_id)
        return key, split_thread_key(key)[0]

    def _working_memory_key(self, thread_id: str | None, resource_id: str | None) -> tuple[str, str]:
        wm = self.working_memory_processor
        scope = wm.scope if wm is not None else ("thread" if thread_id else "resource")
        if scope == "thread":
            if not thread_id:
                raise ValidationError("Working memory of scope 'thread' needs a thread_id")
            return scope, self._key(thread_id, resource_id)[0]
        if not resource_id:
            raise ValidationError("Working memory of scope 'resource' needs a resource_id")
        return scope, resource_id


class _FilteredSearchStore:
    """A memory store whose vector searches are narrowed by a SearchFilter; all else delegates."""

    def __init__(self, store: Any, search_filter: Any) -> None:
        self._store = store
        self._filter = search_filter

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def vectors_search(self, *, vector_store: Any = None, **search: Any) -> Any:
        from memproc.vectors import get_vector_store
        from memproc.vectors.base import search_filtered

        return search_filtered(get_vector_store(vector_store), filter=self._filter, **search)


def _item_id(item: Any) -> str:
    message_id = (
        item.id if isinstance(item, Message) else (item.get("id") if isinstance(item, dict) else None)
    )
    if not isinstance(message_id, str) or not message_id:
        raise ValidationError("update_messages needs the id of each message to update")
    return message_id


def _stored_role(stored: dict[str, Message], item: dict[str, Any]) -> str:
    found = stored.get(item["id"])
    if found is None:
        raise ValidationError(f"No stored message with id {item['id']!r}")
    return found.role


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
    except Exception as exc:
        logs.failure(
            logger, "memproc: embedding saved messages in this process failed; they stay unembedded", exc=exc
        )


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
