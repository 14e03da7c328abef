"""Finding where a text repeats a protected text (a system prompt) verbatim, in linear time.

Both texts are compared in a canonical form (NFKC, lower case, every run of characters that are not
letters or digits as one space, zero-width characters dropped), so a leak cannot hide behind case,
re-wrapping, invisible characters or words joined by hyphens, underscores or dots. A suffix automaton
of the protected text gives, for each position of the response, the length of the longest piece
ending there that also occurs in the protected text ("matching statistics"); pieces at least
`min_chars` long are leaks.

The start of that longest piece never moves left as the response grows, which is what lets a
stream release everything before the current piece: nothing already released can become part of a
later leak.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence

_DROPPED = frozenset("\u200b\u200c\u200d\u2060\ufeff\u00ad\u034f\u180e\uffff")
_SEPARATOR = "\uffff"  # joins several protected texts; dropped from every input, so never matched


def canonical(text: str) -> tuple[str, list[int]]:
    """The canonical form of `text`, and for each of its characters the index it came from: letters
    and digits NFKC-folded and lower-cased, everything else (spaces, punctuation, hyphens, underscores)
    one separator, invisible characters dropped. So "You-are-the_Acme.assistant" reads as "you are the
    acme assistant"."""
    chars: list[str] = []
    origin: list[int] = []
    for index, char in enumerate(text):
        if char in _DROPPED:
            continue
        for folded in unicodedata.normalize("NFKC", char).lower():
            if folded.isalnum():
                chars.append(folded)
                origin.append(index)
            elif chars and chars[-1] != " ":
                chars.append(" ")
                origin.append(index)
    return "".join(chars), origin


class ProtectedText:
    """A suffix automaton over the canonical form of one or more protected texts."""

    def __init__(self, texts: Sequence[str]) -> None:
        source = _SEPARATOR.join(canonical(t)[0] for t in texts if t)
        self.size = len(source)
        self._next: list[dict[str, int]] = [{}]
        self._link = [-1]
        self._length = [0]
        last = 0
        for char in source:
            last = self._extend(last, char)

    def _extend(self, last: int, char: str) -> int:
        nxt, link, length = self._next, self._link, self._length
        current = len(length)
        nxt.append({})
        link.append(-1)
        length.append(length[last] + 1)
        state = last
        while state != -1 and char not in nxt[state]:
            nxt[state][char] = current
            state = link[state]
        if state == -1:
            link[current] = 0
            return current
        target = nxt[state][char]
        if length[state] + 1 == length[target]:
            link[current] = target
            return current
        clone = len(length)
        nxt.append(dict(nxt[target]))
        link.append(link[target])
        length.append(length[state] + 1)
        while state != -1 and nxt[state].get(char) == target:
            nxt[state][char] = clone
            state = link[state]
        link[target] = link[current] = clone
        return current

    def match_lengths(self, text: str) -> list[int]:
        """For each position of the canonical `text`, the longest piece ending there that occurs in
        the protected text."""
        nxt, link, length = self._next, self._link, self._length
        state = matched = 0
        out: list[int] = []
        for char in text:
            while state and char not in nxt[state]:
                state = link[state]
                matched = length[state]
            if char in nxt[state]:
                state = nxt[state][char]
                matched += 1
            else:
                state = matched = 0
            out.append(matched)
        return out

    def leaks(self, text: str, min_chars: int) -> tuple[list[tuple[int, int]], int, int]:
        """(raw spans of `text` that repeat the protected text, merged; where the still-growing
        match at the end starts in `text`; that match's canonical length)."""
        canon, origin = canonical(text)
        lengths = self.match_lengths(canon)
        spans: list[list[int]] = []
        for end, matched in enumerate(lengths):
            if matched < min_chars:
                continue
            start = end - matched + 1
            if spans and start <= spans[-1][1]:
                spans[-1][1] = max(spans[-1][1], end + 1)
            else:
                spans.append([start, end + 1])
        raw = [span for s, e in spans if (span := _snap(text, origin[s], origin[e - 1] + 1))]
        tail = lengths[-1] if lengths else 0
        tail_start = origin[len(canon) - tail] if tail else len(text)
        return raw, tail_start, tail


def _snap(text: str, start: int, end: int) -> tuple[int, int] | None:
    """The span shrunk to whole words, starting at a word and without trailing whitespace: a prompt
    ending ". Always" and a reply going on ". Anything" share ". A", which must not cut "Anything"
    in two (nor swallow the full stop before the leak)."""
    if start > 0 and text[start - 1].isalnum() and text[start].isalnum():
        while start < end and text[start].isalnum():
            start += 1
    if end < len(text) and text[end].isalnum() and text[end - 1].isalnum():
        while end > start and text[end - 1].isalnum():
            end -= 1
    while start < end and not text[start].isalnum():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return (start, end) if start < end else None


def protected(texts: tuple[str, ...]) -> ProtectedText:
    return ProtectedText(texts)
