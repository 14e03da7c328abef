"""A vector column that is pgvector's `vector` on PostgreSQL and float32 bytes elsewhere."""

from __future__ import annotations

from typing import Any

import numpy as np
from django.db import models


def is_postgres(connection: Any) -> bool:
    return connection.vendor == "postgresql"


class VectorField(models.Field):
    """Stores a 1-D float vector.

    The column is untyped `vector` on PostgreSQL (so several embedders of different dimensions can
    share the table; per-embedder HNSW indexes cast to `vector(n)`), and a float32 BLOB elsewhere.
    Values come back as float32 NumPy arrays on both.
    """

    description = "Embedding vector"

    def db_type(self, connection: Any) -> str:
        return "vector" if is_postgres(connection) else "blob"

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> np.ndarray | None:
        return self.to_python(value)

    def to_python(self, value: Any) -> np.ndarray | None:
        if value is None or isinstance(value, np.ndarray):
            return value
        if isinstance(value, (bytes, bytearray, memoryview)):
            return np.frombuffer(bytes(value), dtype=np.float32)
        if isinstance(value, str):
            return np.array([float(x) for x in value.strip("[]").split(",") if x], dtype=np.float32)
        return np.asarray(value, dtype=np.float32)

    def get_db_prep_value(self, value: Any, connection: Any, prepared: bool = False) -> Any:
        if value is None:
            return None
        array = np.asarray(value, dtype=np.float32)
        if array.ndim != 1:
            raise ValueError("a vector must be one-dimensional")
        if is_postgres(connection):
            return vector_literal(array)
        return array.tobytes()


def vector_literal(array: Any) -> str:
    """pgvector's text form, `[1,2,3]`; psycopg sends it untyped so PostgreSQL casts it.

    A turn formats its query vector and the vectors it stores, often the same one twice (the user's
    message is the query), so the last few literals are kept.
    """
    return _literal(np.asarray(array, dtype=np.float32).tobytes())


# Values are written as integers of 1e-9: an int's repr is several times cheaper than a float's
# shortest repr, and pgvector parses each element with strtof, which reads `-123e-9` as it reads
# `-0.000000123`. 1e-9 is finer than float32's spacing for embedding-sized values (|x| > ~0.01);
# anything outside the scale (or not finite, which pgvector rejects with its own error) is
# written as floats.
_SCALE = 1e9
_SCALED_MAX = 1e6


def _literal(raw: bytes) -> str:
    values = np.frombuffer(raw, dtype=np.float32).astype(np.float64)
    if values.size and np.isfinite(values).all() and float(np.abs(values).max()) < _SCALED_MAX:
        scaled = np.rint(values * _SCALE).astype(np.int64).tolist()
        return str(scaled).replace(", ", "e-9,").replace("]", "e-9]")
    return str(values.tolist()).replace(" ", "")
