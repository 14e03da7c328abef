"""The one check of an embedding, shared by every path that caches or stores a vector."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from memproc.exceptions import EmbedderUnavailable

if TYPE_CHECKING:
    from memproc.embedders import Embedder

__all__ = ["embed_checked", "vector_problem"]


def vector_problem(vector: Any, dimensions: int) -> str | None:
    """What is wrong with one embedding, or None when it can be stored and searched.

    The one definition of a usable vector, shared by every path that caches or stores one: a flat
    sequence of exactly `dimensions` finite float32 numbers whose norm is not zero (a zero vector
    has no direction: nothing is similar to it, and cosine similarity divides by its norm).
    """
    if isinstance(vector, (str, bytes, dict)) or vector is None:
        return f"not a vector but {type(vector).__name__}"
    array = _float32(vector)
    if array is None:
        return "not a sequence of numbers"
    if array.ndim != 1:
        return f"not a flat vector (shape {array.shape})"
    if array.size != dimensions:
        return f"{array.size}-d, expected {dimensions}"
    return _values_problem(array)


def _float32(value: Any) -> np.ndarray | None:
    """`value` as float32 numbers, or None; a float32 array as it is (what embed_checked returns is
    checked again before it is stored: no copy, and no `errstate`, which costs more than the check)."""
    if type(value) is np.ndarray and value.dtype == np.float32:
        return value
    try:
        with np.errstate(over="ignore", invalid="ignore"):  # beyond float32's range: inf, refused after
            return np.asarray(value, dtype=np.float32)
    except (TypeError, ValueError):
        return None


def _values_problem(array: np.ndarray) -> str | None:
    if not np.isfinite(array).all():
        return "not finite (NaN or infinity)"
    if not array.any():
        return "all zeros"
    return None


def embed_checked(embedder: Embedder, texts: list[str]) -> np.ndarray:
    """`embedder.embed(texts)` as a float32 matrix, one row per text, every row usable.

    Anything else (a missing vector, NaN or infinity, the wrong size, all zeros, not numbers) raises
    `EmbedderUnavailable`, like an outage: the background task retries it, and nothing of the reply
    is cached or stored, not even its good vectors. Every vector memproc caches or stores comes
    through here.
    """
    vectors = embedder.embed(list(texts))
    try:
        count = len(vectors)
    except TypeError:
        raise EmbedderUnavailable(
            f"{embedder.id} answered {type(vectors).__name__}, not a list of vectors"
        ) from None
    if count != len(texts):
        raise EmbedderUnavailable(f"{embedder.id} answered {count} vectors for {len(texts)} texts")
    dimensions = int(embedder.dimensions)
    if not isinstance(vectors, (str, bytes, dict)):
        # The whole batch at once when it is a clean (count, dimensions) matrix of usable rows; else
        # each vector on its own below, to name the first bad one.
        matrix = _float32(vectors)
        if (
            matrix is not None
            and matrix.shape == (count, dimensions)
            and bool(np.isfinite(matrix).all())
            and bool(matrix.any(axis=1).all())
        ):
            return matrix
    for index, vector in enumerate(vectors):
        problem = vector_problem(vector, dimensions)
        if problem is not None:
            raise EmbedderUnavailable(
                f"{embedder.id} answered an unusable vector {index} of {count}: {problem}"
            )
    return np.asarray(vectors, dtype=np.float32).reshape(count, dimensions)
