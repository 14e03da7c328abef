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

A leak may also be interleaved: a filler word every few words ("You are, um, the Acme assistant, like,
never ..."), a word swapped or dropped. `ProtectedText.leaks` also chains pieces of at least two
words that follow each other in the protected text, with at most `MAX_FILLER` other words between two
pieces in the response and at most `MAX_DROPPED` words of the protected text left out. A chain is a
leak when its pieces hold at least `min_chars` characters and make up at least `MIN_DENSITY` of the
stretch on both sides, so an answer that merely shares words or short phrases with the prompt (in
another order, far apart, or with more of its own words than the prompt's) is not one.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence

MAX_FILLER = 3
MAX_DROPPED = 2
MIN_DENSITY = 0.6
_SEEDS_PER_PAIR = 16  # prompt positions tried per word pair (a repetitive prompt repeats pairs)
_BARRIER = "\uffff"
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
        canonicals = [canonical(t)[0] for t in texts if t]
        source = _SEPARATOR.join(canonicals)
        self.size = len(source)
        self._words = [w for c in canonicals for w in (*c.split(), _BARRIER)]
        self._pairs: dict[tuple[str, str], list[int]] = {}
        for i in range(len(self._words) - 1):
            self._pairs.setdefault((self._words[i], self._words[i + 1]), []).append(i)
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
        tail = lengths[-1] if lengths else 0
        tail_start = origin[len(canon) - tail] if tail else len(text)
        chains, chain_tail = self._chains(canon, min_chars)
        if chain_tail is not None:
            tail_start = min(tail_start, origin[chain_tail])
        spans = _merged([*spans, *chains])
        raw = [span for s, e in spans if (span := _snap(text, origin[s], origin[e - 1] + 1))]
        return raw, tail_start, tail

    def _chains(self, canon: str, min_chars: int) -> tuple[list[list[int]], int | None]:
        """Canonical spans of interleaved leaks (see the module docstring), and where a chain still
        running at the end of `canon` starts (a stream must hold it back), if one is."""
        starts = [0] + [i + 1 for i, c in enumerate(canon) if c == " "]
        words = canon.split(" ")
        if words and not words[-1]:
            words.pop()
        found: list[list[int]] = []
        tail: int | None = None
        j = 0
        while j < len(words) - 1:
            best: tuple[int, int, int] | None = None
            for i in self._pairs.get((words[j], words[j + 1]), ())[:_SEEDS_PER_PAIR]:
                chain = self._follow(words, i, j)
                if best is None or chain[1] > best[1]:
                    best = chain
            if best is None:
                j += 1
                continue
            end, matched_chars, pending = best
            # Still running: filler and then the (maybe unfinished) pair that would continue it.
            if len(words) - end <= MAX_FILLER + 2 and (tail is None or starts[j] < tail):
                tail = starts[j]
            if matched_chars >= min_chars:
                found.append([starts[j], starts[end - 1] + len(words[end - 1])])
                j = end
            else:
                j += 1
        return found, tail

    def _follow(self, words: list[str], i: int, j: int) -> tuple[int, int, int]:
        """Follows the protected text from word `i` along the response from word `j`, over filler and
        dropped words: (the end of the last piece in the response, the characters the pieces hold,
        the pieces' words)."""
        prompt = self._words
        start_i, start_j = i, j
        end = j
        chars = matched = 0
        while True:
            while j < len(words) and i < len(prompt) and words[j] == prompt[i]:
                chars += len(words[j]) + 1
                matched += 1
                i, j = i + 1, j + 1
            end = j
            step = self._resync(words, i, j)
            if step is None:
                break
            if matched + 2 < MIN_DENSITY * (j + step[0] - start_j + 2):
                break
            if matched + 2 < MIN_DENSITY * (i + step[1] - start_i + 2):
                break
            j, i = j + step[0], i + step[1]
        return end, chars - 1, matched

    def _resync(self, words: list[str], i: int, j: int) -> tuple[int, int] | None:
        """The fewest words to skip (response, protected) for the next two to match again."""
        prompt = self._words
        for total in range(1, MAX_FILLER + MAX_DROPPED + 1):
            for skip_j in range(min(total, MAX_FILLER), -1, -1):
                skip_i = total - skip_j
                a, b = j + skip_j, i + skip_i
                if skip_i > MAX_DROPPED or a + 1 >= len(words) or b + 1 >= len(prompt):
                    continue
                if words[a] == prompt[b] != _BARRIER and words[a + 1] == prompt[b + 1]:
                    return skip_j, skip_i
        return None


def _merged(spans: list[list[int]]) -> list[list[int]]:
    out: list[list[int]] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return out


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
