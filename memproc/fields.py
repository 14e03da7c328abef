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

    Rounded to 8 decimals (beyond float32's precision for unit vectors) so the C-level list repr,
    twice as fast as formatting each float, also gives short numbers.
    """
    values = np.round(np.asarray(array, dtype=np.float32).astype(np.float64), 8).tolist()
    return str(values).replace(" ", "")
