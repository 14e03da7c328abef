"""Vector stores: save message embeddings and find the messages closest to a query vector."""

from __future__ import annotations

from typing import Any

from django.db import connections, router

from memproc.conf import build_from_setting, settings
from memproc.models import MessageEmbedding
from memproc.vectors.base import EmbeddingRow, VectorStore
from memproc.vectors.numpy_store import NumpyVectorStore, forget_cached
from memproc.vectors.pgvector_store import PgvectorStore

__all__ = [
    "EmbeddingRow",
    "NumpyVectorStore",
    "PgvectorStore",
    "VectorStore",
    "forget_cached",
    "get_vector_store",
]

NAMED_STORES: dict[str, type] = {"pgvector": PgvectorStore, "numpy": NumpyVectorStore}


def get_vector_store(spec: Any = None) -> VectorStore:
    """The store named by `spec` (default: the VECTOR_STORE setting).

    "auto" is pgvector when the embeddings' database is PostgreSQL, else NumPy; "pgvector", "numpy",
    a dotted path, `{"CLASS": ..., "OPTIONS": {...}}` or a store object are taken as they are. Stores
    are cheap to build (their caches are per process), so nothing is memoised here.
    """
    if spec is None:
        spec = settings.VECTOR_STORE
    if spec == "auto":
        alias = router.db_for_read(MessageEmbedding)
        spec = "pgvector" if connections[alias].vendor == "postgresql" else "numpy"
    if isinstance(spec, str) and spec in NAMED_STORES:
        return NAMED_STORES[spec]()
    return build_from_setting(spec, setting="VECTOR_STORE")
