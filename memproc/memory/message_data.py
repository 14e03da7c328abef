"""The data API of Memory over messages: saving, bulk import, recall, edits and deletion.

Services, selectors, vector stores and models are imported where they are used: they load the ORM,
and a Memory (like an Agent) may be built in a module imported before Django is set up.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from functools import partial
from typing import TYPE_CHECKING, Any

from django.db import transaction

from memproc import background, logs
from memproc.conf import settings
from memproc.db import memproc_db
from memproc.embedders import get_embedder
from memproc.exceptions import ValidationError
from memproc.messages import Message, MessageInput, to_messages
from memproc.processors.base import ProcessorContext
from memproc.processors.semantic_recall import SemanticRecall

logger = logging.getLogger("memproc.memory")  # the name it logged under as one module


class MessageDataMixin:
    """Memory's methods over messages (see Memory)."""

    if TYPE_CHECKING:  # set by Memory (memproc.memory.config) and ThreadDataMixin
        embedder: Any
        vector_store: Any
        last_messages: int | bool
        recall_options: dict[str, Any] | None
        _importing: bool
        _processors: dict[str, Any]

        @property
        def uses_semantic_recall(self) -> bool: ...

        @property
        def embeds_messages(self) -> bool: ...

        def _key(self, thread_id: str, resource_id: str | None) -> tuple[str, str]: ...

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
        from memproc.services.messages import messages_save_with_files
        from memproc.services.recall import sources_for

        values = to_messages(messages)
        # The rows and their embedding's job (an outbox row under Celery) are one commit: a failure
        # leaves nothing saved, rather than messages that nothing will embed.
        with transaction.atomic(using=memproc_db()):
            # Inline files are offloaded to the attachment storage, as in a turn: rows never hold bytes.
            saved = messages_save_with_files(thread_id=thread_id, resource_id=resource_id, messages=values)
            if (self.embeds_messages if embed is None else embed) and saved:
                self._embed_saved(sources_for(saved, thread_id=thread_id, resource_id=resource_id))
        return saved

    def _embed_saved(self, sources: list[Any]) -> None:
        """Embeds just-saved messages after commit (see save_messages for where)."""
        from memproc.services.recall import sources_embed

        def embed_here() -> None:
            sources_embed(sources=sources, embedder=self.embedder, vector_store=self.vector_store)

        if self._importing:
            # In this process, so the rows land while the index is held back; errors reach the caller.
            transaction.on_commit(embed_here, using=memproc_db())
            return
        self._embed_after_commit([s.message_id for s in sources], embed_here)

    @contextmanager
    def bulk_import(self) -> Iterator[None]:
        """A block for loading many messages (history from another system, a backfill).

        Inside it `save_messages` embeds in this process (not on a worker) and the vector store holds
        its index back: on PostgreSQL that is pgvector's HNSW index, which costs milliseconds per row to
        maintain and a fraction of that to build. When the block ends it sends the background job that
        builds it (`memproc.build_index`) and returns without waiting for the build. Searches stay
        correct meanwhile (exact until the index is valid). Start it outside a transaction. Without
        semantic recall it changes nothing.
        """
        if not self.embeds_messages or self._importing:
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

    def delete_messages(self, message_ids: Sequence[str], *, resource_id: str | None = None) -> int:
        """Deletes stored messages, their embeddings and the attachment files no other message
        uses. A message id names a message within its resource: give `resource_id`; without it, each
        id must be held by one resource only (a ValidationError otherwise)."""
        from memproc.selectors.messages import message_keys_named
        from memproc.services.messages import messages_delete

        keys = message_keys_named(ids=message_ids, resource_id=resource_id)
        return messages_delete(message_keys=keys)

    def forget(
        self,
        *,
        resource_id: str,
        message_ids: Sequence[str] | None = None,
        thread_id: str | None = None,
        cascade: bool = True,
        actor: Any = None,
    ) -> Any:
        """Forgets messages, a thread or (with neither) the whole resource, and with `cascade` what
        was derived from them: embeddings, summaries, the working-memory changes their turns wrote
        (or, when a later change built on one, holds it for an operator), unused files, kept answers,
        ids in turn records. Returns the ForgetReceipt, which `manage.py memproc_forget --verify`
        checks; see memproc.services.forget."""
        from memproc.services.forget import forget

        return forget(
            resource_id=resource_id,
            message_ids=message_ids,
            thread_id=thread_id,
            cascade=cascade,
            actor=actor,
        )

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
        self,
        messages: Sequence[Message | dict[str, Any]],
        *,
        resource_id: str | None = None,
        embed: bool | None = None,
    ) -> list[Message]:
        """Replaces the content of stored messages: `Message` objects, or dicts with an `id` and new
        `content` (text or parts) or `parts`; a dict's `role` defaults to the stored one. Text and
        token count follow; the old embeddings are deleted and the new text embedded after commit
        (through `memproc.background`) when the messages had embeddings or this Memory uses recall
        (`embed` decides otherwise). See `messages_update` for what an edit may not change. As for
        `delete_messages`, give `resource_id` unless each id is held by one resource only.
        """
        from memproc.models import message_key
        from memproc.selectors.messages import messages_by_id
        from memproc.services.messages import messages_update
        from memproc.services.recall import EMBEDDABLE_ROLES

        items = list(messages)
        stored = messages_by_id(resource_id=resource_id, ids=[_item_id(item) for item in items])
        values = [
            item
            if isinstance(item, Message)
            else to_messages({**item, "role": item.get("role") or _stored_role(stored, item)})[0]
            for item in items
        ]
        with transaction.atomic(using=memproc_db()):
            updated, unembedded = messages_update(messages=values, resource_id=resource_id)
            wanted = self.embeds_messages if embed is None else embed
            keys = [
                message_key(m.resource_id or "", m.id)
                for m in updated
                if m.role in EMBEDDABLE_ROLES and m.text.strip()
            ]
            keys = [k for k in keys if wanted or k in unembedded]
            if keys and embed is not False:
                self._embed_stored(keys)
        return updated

    def _embed_stored(self, message_keys: list[str]) -> None:
        """Embeds stored messages after commit: a `memproc.embed_messages` job (see save_messages for
        why backends given as objects are used in this process instead under Celery)."""
        from memproc.services.recall import messages_embed

        def embed_here() -> None:
            messages_embed(message_keys=message_keys, embedder=self.embedder, vector_store=self.vector_store)

        self._embed_after_commit(message_keys, embed_here)

    def _embed_after_commit(self, message_ids: list[str], embed_here: Callable[[], None]) -> None:
        """A `memproc.embed_messages` job for `message_ids` after commit; under Celery with backends
        given as objects (a job carries JSON only), `embed_here` in this process instead."""
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


class _FilteredSearchStore:
    """A memory store whose vector searches are narrowed by a SearchFilter; all else delegates."""

    def __init__(self, store: Any, search_filter: Any) -> None:
        self._store = store
        self._filter = search_filter

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def vectors_search(self, *, vector_store: Any = None, **search: Any) -> Any:
        from memproc.models import public_message_id
        from memproc.processors.store import VectorHit
        from memproc.vectors import get_vector_store
        from memproc.vectors.base import search_filtered

        hits = search_filtered(get_vector_store(vector_store), filter=self._filter, **search)
        # The vector store names messages by their keys; recall speaks the ids of the resource.
        return [VectorHit(public_message_id(h.message_id), h.thread_id, h.score) for h in hits]


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
