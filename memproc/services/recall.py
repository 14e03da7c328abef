"""Embedding writes: new messages are embedded in batches, idempotently, reusing stored vectors by
content hash. The process keeps no vector of its own: one of a forgotten text would outlive `forget`.

Every vector is checked (`embed_checked`: one per text, finite, the embedder's size, not all zeros)
before it is written; a bad reply raises `EmbedderUnavailable` and
leaves nothing behind, so one bad answer cannot poison a text for good. Vectors read back from the
table are checked too, so a row written before this check existed is embedded again, not reused.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from django.db.models import Q

from memproc import models
from memproc.conf import settings
from memproc.embedders import chunk_text, content_hash, embed_checked, get_embedder, vector_problem
from memproc.messages import FrozenDict, Message
from memproc.models import message_key, public_thread_id
from memproc.vectors import EmbeddingRow, get_vector_store

logger = logging.getLogger(__name__)

EMBEDDABLE_ROLES = ("user", "assistant")


@dataclass(frozen=True, slots=True)
class EmbeddingSource:
    message_id: str  # the stored message's key (models.message_key), as its embeddings name it
    thread_id: str
    resource_id: str
    text: str


def sources_for(messages: Sequence[Message], *, thread_id: str, resource_id: str) -> list[EmbeddingSource]:
    """What to embed of a turn's messages: user and assistant text, never a message a guardrail
    quarantined (recall must not find it)."""
    return [
        EmbeddingSource(message_key(resource_id, m.id), thread_id, resource_id, m.text)
        for m in messages
        if m.role in EMBEDDABLE_ROLES and m.text.strip() and not _quarantined(m)
    ]


def _quarantined(message: Message) -> bool:
    flag = message.metadata.get("quarantine")
    return isinstance(flag, dict | FrozenDict) and flag.get("status") in models.QUARANTINE_ACTIVE


def messages_embed(*, message_keys: Sequence[str], embedder: Any = None, vector_store: Any = None) -> int:
    """Embeds stored messages (by their keys) that have no vector from this embedder yet, into
    `vector_store` (None: the VECTOR_STORE setting). Re-running does nothing. A job queued before
    message ids had keys (migration 0018) names messages by their bare ids; those are found too."""
    embedder = get_embedder(embedder)
    keys = [k for k in message_keys if models.THREAD_KEY_SEPARATOR in k]
    bare = [k for k in message_keys if models.THREAD_KEY_SEPARATOR not in k]
    rows = (
        models.Message.objects.filter(Q(id__in=keys) | Q(public_id__in=bare))
        .filter(role__in=EMBEDDABLE_ROLES, quarantined=False, recall_excluded=False)
        .exclude(embeddings__model=embedder.id)
        .values_list("id", "thread_id", "resource_id", "text")
    )
    sources = [
        EmbeddingSource(mid, public_thread_id(key), rid, text) for mid, key, rid, text in rows if text.strip()
    ]
    return sources_embed(sources=sources, embedder=embedder, vector_store=vector_store)


def sources_embed(*, sources: Sequence[EmbeddingSource], embedder: Any, vector_store: Any = None) -> int:
    """One embedder call for every chunk not seen before (by content hash); one insert for all rows,
    into `vector_store` (a store object or spec; None: the VECTOR_STORE setting)."""
    rows = embedding_rows(sources=sources, embedder=embedder)
    if rows:
        get_vector_store(vector_store).store(rows)
    return len(rows)


def embedding_rows(
    *, sources: Sequence[EmbeddingSource], embedder: Any, known: Mapping[str, np.ndarray] | None = None
) -> list[EmbeddingRow]:
    """The embedding rows of `sources`, nothing written: one embedder call for every chunk not seen
    before (by content hash). `known` maps texts to vectors the caller already has from this embedder
    (a turn's recall query): a chunk equal to such a one-chunk text is not embedded again.
    Raises what the embedder raises (`embed_checked`), before anything is kept."""
    if not sources:
        return []
    embedder = get_embedder(embedder)
    pieces = [
        (source, index, chunk, content_hash(chunk, embedder.id))
        for source in sources
        for index, chunk in enumerate(chunk_text(source.text, settings.EMBEDDING_CHUNK_CHARS))
    ]
    # query_embed embeds a one-chunk text as that chunk (so its vector is that chunk's, whatever
    # whitespace the stored text has around it) and a longer query whole (no chunk's vector).
    by_hash = {}
    for text, vector in (known or {}).items():
        chunks = chunk_text(text, settings.EMBEDDING_CHUNK_CHARS)
        if len(chunks) == 1:
            by_hash[content_hash(chunks[0], embedder.id)] = vector
    given = {h: by_hash[h] for *_, h in pieces if h in by_hash}
    vectors = {**_known_vectors(embedder, {h for *_, h in pieces} - given.keys()), **given}
    missing = list(dict.fromkeys(h for *_, h in pieces if h not in vectors))
    if missing:
        texts = {h: chunk for _, _, chunk, h in pieces}
        matrix = embed_checked(embedder, [texts[h] for h in missing])  # all usable, or nothing kept
        vectors.update(zip(missing, matrix, strict=True))
    rows = [
        EmbeddingRow(
            message_id=source.message_id,
            thread_id=source.thread_id,
            resource_id=source.resource_id,
            chunk=index,
            model=embedder.id,
            dimensions=int(embedder.dimensions),
            content_hash=h,
            vector=vectors[h],
        )
        for source, index, _, h in pieces
    ]
    return rows


def query_embed(text: str, embedder: Any) -> np.ndarray:
    """The vector of a recall query: its one chunk's, as a stored message's would be, or the whole
    text's when it is longer than a chunk. Not remembered in the process: the turn hands this vector
    to its own save (`known` of `embedding_rows`), and a vector kept here would outlive `forget`."""
    embedder = get_embedder(embedder)
    chunks = chunk_text(text, settings.EMBEDDING_CHUNK_CHARS)
    return embed_checked(embedder, [chunks[0] if len(chunks) == 1 else text])[0]


def _known_vectors(embedder: Any, hashes: set[str]) -> dict[str, np.ndarray]:
    """Vectors already stored for these texts (rows whose vector is unusable, stored before vectors
    were checked, are skipped: embedded again)."""
    if not hashes:
        return {}
    rows = models.MessageEmbedding.objects.filter(
        model=embedder.id, content_hash__in=list(hashes)
    ).values_list("content_hash", "vector")
    dimensions = int(embedder.dimensions)
    return {h: vector for h, vector in rows if vector_problem(vector, dimensions) is None}
