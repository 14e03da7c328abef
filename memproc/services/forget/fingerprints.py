"""Keyed fingerprints of forgotten text: enough to recognise it again, not to read it back.

A text's fingerprints are HMAC-SHA256 digests (keyed by SECRET_KEY and a per-receipt salt, cut to
64 bits) of its word n-grams: every run of NGRAM words, or the whole text when it is shorter but has
at least MIN_WORDS words. Words are compared case-folded after NFKC, so a copy that differs only in
case, spacing or punctuation is still found. A paraphrase is not: verification proves the forgotten
words are gone, not every idea derived from them (those go by lineage, see `forget`).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import unicodedata
from collections.abc import Iterable, Iterator
from typing import Any

from django.conf import settings

NGRAM = 5
MIN_WORDS = 3  # shorter texts ("yes", "thank you") would be found everywhere: not fingerprinted
MAX_FINGERPRINTS = 50_000  # per receipt; a forget of more text keeps the first ones

_WORD = re.compile(r"\w+")


def words(text: str) -> list[str]:
    return _WORD.findall(unicodedata.normalize("NFKC", text).casefold())


def grams(text: str, sizes: Iterable[int]) -> Iterator[tuple[int, str]]:
    """(size, n-gram) for each size: every run of `size` words of `text`."""
    found = words(text)
    for size in sizes:
        for start in range(len(found) - size + 1):
            yield size, " ".join(found[start : start + size])


def _key(salt: str) -> bytes:
    return hashlib.sha256(f"memproc-forget:{settings.SECRET_KEY}:{salt}".encode()).digest()


def key_digests(keys: Iterable[str], *, salt: str) -> list[str]:
    """Keyed digests of message keys: a receipt names the forgotten messages without their ids."""
    key = _key(salt)
    return sorted({hmac.new(key, k.encode(), hashlib.sha256).hexdigest()[:16] for k in keys})


def fingerprints(texts: Iterable[str], *, salt: str) -> list[list[Any]]:
    """[size, digest] for the n-grams of the forgotten texts (sorted, without repeats)."""
    key = _key(salt)
    found: set[tuple[int, str]] = set()
    for text in texts:
        count = len(words(text))
        if count < MIN_WORDS:
            continue
        size = min(NGRAM, count)
        for _, gram in grams(text, [size]):
            found.add((size, hmac.new(key, gram.encode(), hashlib.sha256).hexdigest()[:16]))
            if len(found) >= MAX_FINGERPRINTS:
                break
    return [list(pair) for pair in sorted(found)]


class Matcher:
    """Finds a receipt's fingerprints in other text."""

    def __init__(self, prints: Iterable[Iterable[Any]], *, salt: str) -> None:
        self.key = _key(salt)
        self.prints = {(int(size), str(value)) for size, value in prints}
        self.sizes = sorted({size for size, _ in self.prints})

    def __bool__(self) -> bool:
        return bool(self.prints)

    def found_in(self, text: str) -> bool:
        for size, gram in grams(text, self.sizes):
            if (size, hmac.new(self.key, gram.encode(), hashlib.sha256).hexdigest()[:16]) in self.prints:
                return True
        return False
