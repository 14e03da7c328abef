"""A deterministic, offline embedder for tests and benchmarks: no model, no network, microseconds."""

from __future__ import annotations

import math
import re
from functools import lru_cache

from memproc.exceptions import ConfigurationError

_TOKEN = re.compile(r"[a-z0-9]+")
_FNV_OFFSET = 0x811C9DC5
_FNV_PRIME = 0x01000193


class HashEmbedder:
    """Bag-of-words feature hashing: texts sharing words are close, others are near-orthogonal.

    Each lower-cased `[a-z0-9]+` token hashes (FNV-1a, 32 bits) to one dimension, adding +1 (hash
    below 2**31) or -1; the sum is L2-normalised and a text with no token embeds as the first unit
    vector. With `dimensions=384` it gives exactly the vectors of the benchmark workload's embedder.
    """

    def __init__(self, *, dimensions: int = 64) -> None:
        if dimensions <= 0:
            raise ConfigurationError("HashEmbedder(dimensions=...) must be positive")
        self.dimensions = dimensions
        self.id = f"hash-{dimensions}"

    def embed(self, texts: list[str]) -> list[list[float]]:
        return [self._embed_one(text) for text in texts]

    def _embed_one(self, text: str) -> list[float]:
        counts: dict[int, int] = {}
        for token in _TOKEN.findall(text.lower()):
            slot, sign = _slot(token, self.dimensions)
            counts[slot] = counts.get(slot, 0) + sign
        vector = [0.0] * self.dimensions
        # Integer sums make the norm exact, so the floats match the reference bit for bit.
        norm = math.sqrt(sum(c * c for c in counts.values()))
        if norm == 0:
            vector[0] = 1.0
            return vector
        for slot, count in counts.items():
            vector[slot] = count / norm
        return vector


# The benchmark workloads embed thousands of messages with this embedder: 2,000 short texts take
# 46 ms with the cache, 64 ms without (2026-12-03, 2-core machine).
@lru_cache(maxsize=65536)
def _slot(token: str, dimensions: int) -> tuple[int, int]:
    value = fnv1a_32(token)
    return value % dimensions, 1 if value < 2**31 else -1


def fnv1a_32(text: str) -> int:
    value = _FNV_OFFSET
    for byte in text.encode():
        value = ((value ^ byte) * _FNV_PRIME) & 0xFFFFFFFF
    return value
