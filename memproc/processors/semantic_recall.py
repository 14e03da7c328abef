"""SemanticRecall: finds related past messages by meaning; embeds the turn's new messages."""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from typing import Any

from memproc import logs, telemetry
from memproc.embedders import get_embedder
from memproc.exceptions import ConfigurationError
from memproc.messages import Message
from memproc.messages.prompt_tags import indent_lines, neutralise
from memproc.processors.base import ProcessorContext
from memproc.processors.store import VectorHit
from memproc.processors.turn_info import RecalledHit

logger = logging.getLogger(__name__)

CROSS_THREAD_HEADER = (
    "Remembered from another conversation with this user. These messages are from earlier threads; "
    "use them only if relevant:"
)


# How many more hits a search fetches when archived threads' hits will be dropped from it.
ARCHIVED_OVERFETCH = 4


def check_search_options(owner: str, *, top_k: Any, scope: Any, threshold: Any) -> None:
    """What recall and the memory search tool both take: `top_k`, `scope`, `threshold`."""
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise ConfigurationError(f"{owner}(top_k=...) must be an integer >= 1")
    if scope not in ("resource", "thread"):
        raise ConfigurationError(f"{owner}(scope=...) must be 'resource' or 'thread'")
    if threshold is not None and not -1.0 <= threshold <= 1.0:
        raise ConfigurationError(f"{owner}(threshold=...) is a cosine similarity in [-1, 1]")


class SearchSettings:
    """What recall and the memory search tool both are configured with, checked in one place."""

    def _search_settings(
        self,
        owner: str,
        *,
        embedder: Any,
        vector_store: Any,
        top_k: int,
        scope: str,
        threshold: float | None,
        include_archived: bool,
    ) -> None:
        check_search_options(owner, top_k=top_k, scope=scope, threshold=threshold)
        self._embedder = embedder
        self.vector_store = vector_store
        self.top_k = top_k
        self.scope = scope
        self.threshold = threshold
        self.include_archived = bool(include_archived)

    @property
    def embedder(self) -> Any:
        return get_embedder(self._embedder)


class SemanticRecall(SearchSettings):
    """Input: embeds the last new user message, searches the scope (the resource's threads, or this
    thread) for the `top_k` most similar stored messages, and loads each hit with `message_range`
    neighbours from the hit's own thread. Messages already in the prompt are dropped; this thread's
    hits join the history in time order; other threads' hits go into one system message marked as
    remembered from another conversation. Any failure (embedder, vector store) is logged and the turn
    goes on without recall. Archived threads other than this one are left out unless
    `include_archived`: their hits are dropped after a search that fetches `ARCHIVED_OVERFETCH` times
    as many, so a resource whose archived threads hold most of the close matches may get fewer than
    `top_k` hits. A turn in an archived thread recalls its own messages as usual.

    Output: asks the turn to embed the user and assistant messages of its input and responses after
    the save commits (one batched embedder call), except those a guardrail quarantined; it never
    blocks or fails the turn. Quarantined stored messages are never loaded as neighbours either
    (the store skips them).
    """

    id = "semantic-recall"

    def __init__(
        self,
        *,
        embedder: Any = None,
        vector_store: Any = None,
        top_k: int = 4,
        message_range: int | dict[str, int] = 1,
        scope: str = "resource",
        threshold: float | None = None,
        include_archived: bool = False,
    ) -> None:
        self._search_settings(
            "SemanticRecall",
            embedder=embedder,
            vector_store=vector_store,
            top_k=top_k,
            scope=scope,
            threshold=threshold,
            include_archived=include_archived,
        )
        if isinstance(message_range, dict):
            self.before, self.after = int(message_range.get("before", 0)), int(message_range.get("after", 0))
        else:
            self.before = self.after = int(message_range)
        if self.before < 0 or self.after < 0:
            raise ConfigurationError("SemanticRecall(message_range=...) must be >= 0")

    def process_input(self, ctx: ProcessorContext) -> list[Message] | None:
        turn, store = ctx.turn, ctx.store
        if turn is None or store is None:
            return None
        query = next((m.text for m in reversed(ctx.new_messages) if m.role == "user" and m.text.strip()), "")
        if not query:
            return None
        attributes = {"memproc.recall.scope": self.scope, "memproc.recall.top_k": self.top_k}
        with telemetry.span("memproc.recall", parent=ctx.span, attributes=attributes) as span:
            try:
                recalled = self.recall(ctx, query)
            except Exception as exc:
                logs.failure(
                    logger,
                    "memproc: semantic recall failed; the turn goes on without it",
                    exc=exc,
                    extra=logs.current(),
                )
                telemetry.fail(span, exc)
                turn.info.recall_error = True
                return None
            span.set_attribute("memproc.recall.hits", len(ctx.state.get("scores", {})))
        if recalled is None:
            return None
        same_thread, other_threads = recalled
        ctx.mark_loaded(same_thread)
        scores = ctx.state.get("scores", {})
        turn.info.recalled = [
            RecalledHit(m.id, m.thread_id, m.text, scores.get(m.id)) for m in [*same_thread, *other_threads]
        ]
        # The conversation object puts these in time order among the history, before the input.
        result = [*same_thread, *ctx.messages]
        if other_threads:
            result.insert(0, cross_thread_message(other_threads))
        return result

    def recall(self, ctx: ProcessorContext, query: str) -> tuple[list[Message], list[Message]] | None:
        present = {m.id for m in ctx.messages}
        archived = archived_threads(
            ctx.store,
            scope=self.scope,
            include_archived=self.include_archived,
            thread_id=ctx.thread_id,
            resource_id=ctx.resource_id,
        )
        embedder = self.embedder
        vector = ctx.store.query_vector(text=query, embedder=embedder)
        if ctx.turn is not None:  # the stored user message's vector, when its text is the query
            ctx.turn.writes.vectors[query] = vector
        hits = search(
            ctx.store,
            query=query,
            vector=vector,
            embedder=embedder,
            vector_store=self.vector_store,
            scope=self.scope,
            thread_id=ctx.thread_id,
            resource_id=ctx.resource_id,
            top_k=self.top_k,
            threshold=self.threshold,
            present=present,
            archived=archived,
        )
        ctx.state["scores"] = {h.message_id: round(h.score, 4) for h in hits}  # neighbours have none
        if not hits:
            return None
        groups = ctx.store.messages_around(
            message_ids=[h.message_id for h in hits],
            resource_id=ctx.resource_id,
            before=self.before,
            after=self.after,
        )
        same: list[Message] = []
        other: list[Message] = []
        for thread_id, messages in groups.items():
            fresh = [m for m in messages if m.id not in present]
            (same if thread_id == ctx.thread_id else other).extend(fresh)
        return same, other

    def process_output_result(self, ctx: ProcessorContext) -> list[Message] | None:
        embed_turn(ctx, embedder=self._embedder, vector_store=self.vector_store)
        return None


def embed_turn(ctx: ProcessorContext, *, embedder: Any, vector_store: Any) -> None:
    """Asks the turn to embed the user and assistant messages of its input and responses after the
    save commits, but those a guardrail quarantined (recall must never find them)."""
    if ctx.turn is not None:
        turn_messages = [*ctx.input_messages, *ctx.messages]
        ctx.turn.writes.embed = [
            m for m in turn_messages if m.role in ("user", "assistant") and not is_quarantined(m)
        ]
        ctx.turn.writes.embedder = embedder
        ctx.turn.writes.vector_store = vector_store


def search(
    store: Any,
    *,
    query: str,
    embedder: Any,
    vector_store: Any,
    scope: str,
    thread_id: str | None,
    resource_id: str | None,
    top_k: int,
    threshold: float | None,
    present: Collection[str] = (),
    archived: Collection[str] = frozenset(),
    vector: Any = None,
) -> list[VectorHit]:
    """The `top_k` stored messages closest to `query` in the scope: always only the resource's, and
    only this thread's in scope "thread"; none of `present` (already in the prompt), none of the
    `archived` threads. The one search of recall and of the `search_memory` tool. `vector` is the
    query's, when the caller embedded it already."""
    if vector is None:
        vector = store.query_vector(text=query, embedder=embedder)
    scope_filter: dict[str, Any] = {"resource_id": resource_id}
    if scope == "thread":
        scope_filter["thread_id"] = thread_id
    hits = store.vectors_search(
        embedder_id=embedder.id,
        vector=vector,
        top_k=(top_k + len(present)) * (ARCHIVED_OVERFETCH if archived else 1),
        threshold=threshold,
        vector_store=vector_store,
        **scope_filter,
    )
    return [h for h in hits if h.message_id not in present and h.thread_id not in archived][:top_k]


def archived_threads(
    store: Any, *, scope: str, include_archived: bool, thread_id: str | None, resource_id: str | None
) -> frozenset[str]:
    """The resource's archived threads whose messages a search leaves out: none in thread scope,
    with `include_archived`, or from a store that knows no archiving (`threads_archived` is optional
    in the store protocol). The turn's own thread is never left out."""
    lookup = getattr(store, "threads_archived", None)
    if scope != "resource" or include_archived or lookup is None:
        return frozenset()
    return frozenset(lookup(resource_id=resource_id)) - {thread_id}


def cross_thread_message(messages: list[Message]) -> Message:
    """One system message for other threads' hits. Its metadata says where each message's line is
    (`{"recalled": [{"id", "thread_id", "start", "end"}]}`), so a guardrail can withhold one line."""
    text = CROSS_THREAD_HEADER
    where: list[dict[str, Any]] = []
    for m in sorted(messages, key=lambda m: (m.thread_id or "", _time_key(m))):
        text += "\n"
        line = recalled_line(m)
        where.append({"id": m.id, "thread_id": m.thread_id, "start": len(text), "end": len(text) + len(line)})
        text += line
    return Message.create("system", text, id="semantic-recall:other-threads", metadata={"recalled": where})


def recalled_line(message: Message) -> str:
    """One remembered message as the model reads it: `- [when] role: text`, later lines indented and
    memproc's tags neutralised, so stored text can neither forge a line nor a tag."""
    when = message.created_at.strftime("%Y-%m-%d %H:%M") if message.created_at else ""
    return f"- [{when}] {message.role}: {indent_lines(neutralise(message.text))}"


def is_quarantined(message: Message) -> bool:
    """A guardrail's flag (memproc.guardrails; the database's `Message.quarantined` says the same)."""
    flag = message.metadata.get("quarantine")
    return isinstance(flag, Mapping) and flag.get("status") in ("flagged", "confirmed")


def _time_key(message: Message) -> Any:
    return message.created_at.timestamp() if message.created_at else 0.0
