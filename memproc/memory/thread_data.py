"""The data API of Memory over threads, working memory, thread summaries and exports.

Services, selectors and models are imported where they are used: they load the ORM, and a Memory
(like an Agent) may be built in a module imported before Django is set up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memproc.exceptions import ConfigurationError, ThreadNotFoundError, ValidationError


class ThreadDataMixin:
    """Memory's methods over threads, working memory, summaries and exports (see Memory)."""

    if TYPE_CHECKING:  # set by Memory (memproc.memory.config)

        @property
        def working_memory_processor(self) -> Any: ...

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
        archived: bool | None = None,
    ) -> list[Any]:
        """A resource's threads, most recently active first (`order_by`: "updated_at" or
        "created_at", "-" for newest first; the id breaks ties, so the order is stable).

        `metadata` keeps threads whose metadata holds each key with that value (a string, number,
        boolean or None). `archived` True keeps archived threads only, False the others; None (the
        default, unlike the HTTP list's) every thread. With `limit`, one page: the returned list's
        `next_cursor` (None on the last page) passed back as `cursor` gives the next, in the same
        `order_by`.
        """
        from memproc.selectors.threads import threads_page

        return threads_page(
            resource_ids=[resource_id],
            limit=limit,
            cursor=cursor,
            order_by=order_by,
            metadata=metadata,
            archived=archived,
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

    def archive_thread(self, thread_id: str, *, resource_id: str | None = None) -> Any:
        """Archives a thread (idempotent): it leaves the HTTP API's default thread list and other
        threads' semantic recall (unless `semantic_recall={"include_archived": True}`); its messages
        stay, and a turn on it still runs, recalls its own messages and leaves it archived."""
        from memproc.services.threads import thread_archive

        return thread_archive(thread=self._thread(thread_id, resource_id))

    def unarchive_thread(self, thread_id: str, *, resource_id: str | None = None) -> Any:
        """Brings an archived thread back (idempotent)."""
        from memproc.services.threads import thread_unarchive

        return thread_unarchive(thread=self._thread(thread_id, resource_id))

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
