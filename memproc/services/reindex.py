"""Embedding maintenance: (re-)embed the messages of a thread, a resource or everything with one embedder.

Work goes in batches of messages ordered by `(created_at, id)`. Only messages that have no vector from
the chosen embedder yet are embedded, so a run can stop anywhere and start again: each batch reports a
`ReindexPosition` (its last message), and passing it back as `after=` continues behind it. Messages
stored while a run goes on come later in that order, so a long run picks them up too.

`embedding_index_merge` is the other maintenance job, PostgreSQL only: it moves an embedder's tail
(rows written with `indexed = false`, outside its HNSW graph) into the graph, in batches, and, when
the embedder has grown past HNSW_BUILD_MIN_ROWS with no valid index, builds it (`embedding_index_build`,
also the body of `memproc.build_index`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote, unquote

from django.db import connections, router
from django.db.models import Q, QuerySet
from django.utils.dateparse import parse_datetime

from memproc import models
from memproc.embedders import get_embedder
from memproc.exceptions import ValidationError
from memproc.models import public_thread_id
from memproc.selectors.threads import thread_key_for
from memproc.services.recall import EMBEDDABLE_ROLES, EmbeddingSource, sources_embed
from memproc.vectors.pgvector_maintenance import index_build_due, index_tail_merge

DEFAULT_BATCH_SIZE = 100
MERGE_BATCH_SIZE = 500


@dataclass(frozen=True, slots=True)
class ReindexPosition:
    """The last message a run has finished with; `str()` gives the token a command prints."""

    created_at: datetime
    message_id: str  # the message's key (`models.message_key`)

    def __str__(self) -> str:
        # Percent-encoded: the key's separator is a control character a terminal would not show.
        return f"{self.created_at.isoformat()}|{quote(self.message_id, safe='')}"

    @classmethod
    def parse(cls, token: str) -> ReindexPosition:
        """The position printed by an earlier run (`<created_at ISO 8601>|<message id>`)."""
        stamp, sep, message_id = (token or "").strip().partition("|")
        created_at = parse_datetime(stamp) if sep else None
        if created_at is None or not message_id or created_at.tzinfo is None:
            raise ValidationError(
                f"Not a reindex position: {token!r} "
                "(expected '<created_at, ISO 8601 with an offset>|<message id>')"
            )
        return cls(created_at=created_at, message_id=unquote(message_id))


@dataclass(frozen=True, slots=True)
class ReindexBatch:
    scanned: int  # messages of the scope that had no vector from the embedder
    embedded: int  # of those, messages embedded now (blank texts have nothing to embed)
    vectors: int  # rows stored (long messages are embedded in several chunks)
    position: ReindexPosition


@dataclass(frozen=True, slots=True)
class ReindexSummary:
    embedder_id: str
    scanned: int = 0
    embedded: int = 0
    vectors: int = 0
    position: ReindexPosition | None = None


def reindex_pending_count(
    *,
    embedder: Any = None,
    thread_id: str | None = None,
    resource_id: str | None = None,
    after: ReindexPosition | None = None,
) -> int:
    """How many messages of the scope (behind `after`) still lack a vector from `embedder`."""
    return _pending(
        get_embedder(embedder).id, thread_id=thread_id, resource_id=resource_id, after=after
    ).count()


def reindex_batches(
    *,
    embedder: Any = None,
    thread_id: str | None = None,
    resource_id: str | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    after: ReindexPosition | None = None,
) -> Iterator[ReindexBatch]:
    """Embeds, batch by batch, the scope's messages that lack a vector from `embedder`.

    The scope is one thread, one resource, or (neither given) every message. Each batch is one
    embedder call and one insert, committed before it is yielded, so the yielded position is safe to
    resume from. Embedder errors propagate (EmbedderUnavailable is transient: run again later).
    """
    if batch_size <= 0:
        raise ValidationError("batch_size must be positive")
    embedder = get_embedder(embedder)
    while True:
        rows = list(
            _pending(embedder.id, thread_id=thread_id, resource_id=resource_id, after=after)
            .order_by("created_at", "id")
            .values_list("id", "thread_id", "resource_id", "text", "created_at")[:batch_size]
        )
        if not rows:
            return
        sources = [
            EmbeddingSource(mid, public_thread_id(key), rid, text)
            for mid, key, rid, text, _ in rows
            if text.strip()
        ]
        vectors = sources_embed(sources=sources, embedder=embedder) if sources else 0
        last = rows[-1]
        after = ReindexPosition(created_at=last[4], message_id=last[0])
        yield ReindexBatch(scanned=len(rows), embedded=len(sources), vectors=vectors, position=after)


def reindex_run(
    *,
    embedder: Any = None,
    thread_id: str | None = None,
    resource_id: str | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    after: ReindexPosition | None = None,
) -> ReindexSummary:
    """`reindex_batches` to the end, summed up."""
    embedder = get_embedder(embedder)
    scanned = embedded = vectors = 0
    position = after
    for batch in reindex_batches(
        embedder=embedder, thread_id=thread_id, resource_id=resource_id, batch_size=batch_size, after=after
    ):
        scanned += batch.scanned
        embedded += batch.embedded
        vectors += batch.vectors
        position = batch.position
    return ReindexSummary(
        embedder_id=embedder.id, scanned=scanned, embedded=embedded, vectors=vectors, position=position
    )


def _pending(
    embedder_id: str, *, thread_id: str | None, resource_id: str | None, after: ReindexPosition | None
) -> QuerySet[models.Message]:
    qs = models.Message.objects.filter(role__in=EMBEDDABLE_ROLES, recall_excluded=False)
    if thread_id is not None:
        qs = qs.filter(thread_id=thread_key_for(thread_id=thread_id, resource_id=resource_id))
    if resource_id is not None:
        qs = qs.filter(resource_id=resource_id)
    if after is not None:
        qs = qs.filter(
            Q(created_at__gt=after.created_at) | Q(created_at=after.created_at, id__gt=after.message_id)
        )
    return qs.exclude(embeddings__model=embedder_id)


def embedding_index_merge(
    *,
    embedder_id: str | None = None,
    dimensions: int | None = None,
    batch_size: int = MERGE_BATCH_SIZE,
    using: str | None = None,
) -> int:
    """Marks the unmarked embeddings of one embedder (and size), or of all, as indexed, in batches;
    returns how many rows it marked. PostgreSQL only (elsewhere nothing is indexed: returns 0).

    Marking a row updates it, and the new row version enters the partial HNSW index: the graph
    insertion a turn used to pay, here in a background job. Called outside a transaction, each batch
    commits on its own, so searches see the tail shrink as the graph grows and a stopped merge loses
    nothing (inside one, the batches are savepoints that commit with it). One merge
    per embedder runs at a time (a session advisory lock; a second merge of it returns at once),
    and rows locked by a writer are skipped until the next merge, so running it again or
    concurrently is harmless.
    """
    if batch_size <= 0:
        raise ValidationError("batch_size must be positive")
    alias = using or router.db_for_write(models.MessageEmbedding)
    connection = connections[alias]
    if connection.vendor != "postgresql":
        return 0
    marked = 0
    for model, size in _tails(connection, embedder_id, dimensions):
        marked += index_tail_merge(connection, model, size, batch_size)
        if not connection.in_atomic_block:
            # The merge is sent every MERGE_AFTER_ROWS rows a process writes: the moment to notice
            # that the embedder outgrew exact search. A valid index costs one catalog lookup here.
            index_build_due(embedder_id=model, dimensions=size, using=alias)
    return marked


def embedding_index_build(
    *,
    embedder_id: str | None = None,
    dimensions: int | None = None,
    using: str | None = None,
    force: bool = False,
) -> dict[str, str]:
    """Builds the HNSW index of the embedder given (or of every embedder) where it is missing or
    invalid and the embedder has HNSW_BUILD_MIN_ROWS rows (any number with `force`), CONCURRENTLY;
    returns index name -> what happened (see `index_build_due`). PostgreSQL only (elsewhere: {})."""
    alias = using or router.db_for_write(models.MessageEmbedding)
    return index_build_due(embedder_id=embedder_id, dimensions=dimensions, using=alias, force=force)


def _tails(connection: Any, embedder_id: str | None, dimensions: int | None) -> list[tuple[str, int]]:
    if embedder_id is not None and dimensions is not None:
        return [(embedder_id, int(dimensions))]
    tail = models.MessageEmbedding.objects.using(connection.alias).filter(indexed=False)
    if embedder_id is not None:
        tail = tail.filter(model=embedder_id)
    if dimensions is not None:
        tail = tail.filter(dimensions=dimensions)
    return list(tail.order_by().values_list("model", "dimensions").distinct())
