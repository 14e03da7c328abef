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
    try:
        with np.errstate(over="ignore", invalid="ignore"):  # beyond float32's range: inf, refused below
            array = np.asarray(vector, dtype=np.float32)
    except (TypeError, ValueError):
        return "not a sequence of numbers"
    if array.ndim != 1:
        return f"not a flat vector (shape {array.shape})"
    if array.size != dimensions:
        return f"{array.size}-d, expected {dimensions}"
    if not np.all(np.isfinite(array)):
        return "not finite (NaN or infinity)"
    if not np.any(array):
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
    for index, vector in enumerate(vectors):
        problem = vector_problem(vector, dimensions)
        if problem is not None:
            raise EmbedderUnavailable(
                f"{embedder.id} answered an unusable vector {index} of {count}: {problem}"
            )
    return np.asarray(vectors, dtype=np.float32).reshape(count, dimensions)
