"""Offline prompt-injection scoring: the phrase rules of `_injection_lexicon` over canonical copies of
the text, and over whatever the text hides.

The text is read in several spellings, each a copy that maps back to the original: NFKC with look-alike
letters folded to Latin, invisible characters dropped, case-folded, accents removed and whitespace
squeezed; the same with leetspeak undone ("1gn0r3"); with letter-spaced words joined ("i g n o r e",
"i.g.n.o.r.e") and words broken by hyphens or line breaks mended ("ig-nore", "ignore\\nprevious").
Payloads are decoded and scored as well: base64 and hex runs, %-encoding, Unicode tag characters, and
ROT13 or reversed text when the message mentions them. Hits combine as a noisy OR, 1 - Π(1 - w), per
category and overall, so two weak signals count more than one.

It catches what an attack has to say, in the languages of the lexicon; it is not a classifier, and a
paraphrase it has no words for gets past it (use `model=` as well).
"""

from __future__ import annotations

import base64
import binascii
import codecs
import hashlib
import re
import threading
import urllib.parse
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field

from memproc.guardrails._injection_lexicon import RULES, Rule, leet_tolerant
from memproc.guardrails._normalize import fold

__all__ = ["RULES", "Verdict", "score_text"]

_TOKEN = re.compile(r"[^\s.,;:?()\[\]\"'/]+")
_LEET = str.maketrans(
    {"0": "o", "1": "i", "3": "e", "4": "a", "5": "s", "7": "t", "9": "g", "@": "a", "$": "s", "|": "i",
     "!": "i", "+": "t"}
)  # fmt: skip
_SPACED = re.compile(r"(?<![^\W_])(?:[^\W_][ .\-_*]){2,}[^\W_](?![^\W_])")
_BROKEN = re.compile(r"(?<=[^\W\d_])(?:-\s*|\s*\n\s*)(?=[^\W\d_])")
_BASE64 = re.compile(r"(?<![A-Za-z0-9+/=_-])[A-Za-z0-9+/_-]{16,}={0,2}(?![A-Za-z0-9+/=_-])")
_HEX = re.compile(r"\b(?:[0-9a-fA-F]{2}[ :]?){12,}\b")
_PERCENT = re.compile(r"(?:%[0-9a-fA-F]{2}){6,}")
_TAGS = re.compile("[\U000e0000-\U000e007f]{4,}")
_MENTIONS_ROT = re.compile(r"\brot-?13\b|\bcaesar\b|\brot(?:ate|ated)\b", re.I)
_MENTIONS_REVERSE = re.compile(r"\brevers\w*\b|\bbackwards?\b", re.I)
_HIDDEN_FLOOR = 0.85  # a decoded payload that reads as an attack is hidden on purpose


@dataclass(frozen=True, slots=True)
class Verdict:
    score: float
    categories: dict[str, float]
    # Where the strongest hits are in the original text: (start, end) pairs, merged, in order.
    spans: tuple[tuple[int, int], ...] = field(default=())

    @property
    def names(self) -> list[str]:
        return sorted(self.categories)


@dataclass(frozen=True, slots=True)
class _Copy:
    """One spelling of the text, with the original span of each character."""

    text: str
    starts: tuple[int, ...]
    ends: tuple[int, ...]
    # For a leetspeak reading: which characters it changed ("1" where a digit became a letter). Such a
    # copy is read with the rules that take "i" and "l" for each other, and a hit counts only when it
    # covers a changed character: otherwise the plain copy would have found it, or it is noise.
    changed: str | None = None

    def source_span(self, start: int, end: int) -> tuple[int, int]:
        return self.starts[start], self.ends[max(start, end - 1)]

    def keep(self, indices: list[int]) -> _Copy:
        return _Copy(
            "".join(self.text[i] for i in indices),
            tuple(self.starts[i] for i in indices),
            tuple(self.ends[i] for i in indices),
            None if self.changed is None else "".join(self.changed[i] for i in indices),
        )


def score_text(text: str, *, decode: bool = True) -> Verdict:
    """The heuristic verdict for `text` (0 means no rule fired). History and recall bring the same
    messages back turn after turn, so verdicts of texts up to `_CACHED_CHARS` long are remembered,
    by a digest of the text: the process keeps no user text (it would outlive `forget`)."""
    if len(text) > _CACHED_CHARS:
        return _score(text, decode=decode)
    key = (hashlib.blake2b(text.encode(), digest_size=16).digest(), decode)
    with _verdicts_lock:
        verdict = _verdicts.get(key)
        if verdict is not None:
            _verdicts.move_to_end(key)
            return verdict
    verdict = _score(text, decode=decode)
    with _verdicts_lock:
        _verdicts[key] = verdict
        while len(_verdicts) > _CACHED_VERDICTS:
            _verdicts.popitem(last=False)
    return verdict


_CACHED_CHARS = 4000
_CACHED_VERDICTS = 2048
# The history and recall channels (on by default) score the same stored messages again on every turn
# of a thread. Measured 2026-12-04 on this 2-core machine: 1.9 ms for a 550-character text, 12 ms for
# 4,000, so 20–30 ms a turn for a window of ten such messages; remembered, under 0.1 ms.
_verdicts: OrderedDict[tuple[bytes, bool], Verdict] = OrderedDict()
_verdicts_lock = threading.Lock()


def _score(text: str, *, decode: bool) -> Verdict:
    weights: dict[Rule, float] = {}
    spans: list[tuple[float, int, int]] = []
    for copy in _copies(text):
        for rule in RULES:
            if rule in weights:
                continue
            match = _search(rule, copy)
            if match:
                weights[rule] = rule.weight
                if rule.weight >= 0.5:
                    spans.append((rule.weight, *copy.source_span(*match)))
    categories: dict[str, float] = {}
    for rule, weight in weights.items():
        categories[rule.category] = _noisy_or(categories.get(rule.category, 0.0), weight)
    if decode:
        for hidden, where in _decoded(text):
            inner = score_text(hidden, decode=False).score
            if inner >= 0.5:
                value = max(_HIDDEN_FLOOR, inner)
                categories["encoded-payload"] = _noisy_or(categories.get("encoded-payload", 0.0), value)
                spans.append((value, *where))
    total = 0.0
    for value in categories.values():
        total = _noisy_or(total, value)
    return Verdict(round(total, 4), {k: round(v, 4) for k, v in categories.items()}, _merge(spans))


def _noisy_or(a: float, b: float) -> float:
    return 1 - (1 - a) * (1 - b)


def _merge(spans: list[tuple[float, int, int]]) -> tuple[tuple[int, int], ...]:
    merged: list[list[int]] = []
    for _, start, end in sorted(spans, key=lambda s: (s[1], s[2])):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return tuple((s, e) for s, e in merged[:8])


# --- spellings ------------------------------------------------------------------------------------


def _search(rule: Rule, copy: _Copy) -> tuple[int, int] | None:
    if copy.changed is None:
        match = rule.pattern.search(copy.text)
        return match.span() if match else None
    for match in leet_tolerant(rule).finditer(copy.text):
        if "1" in copy.changed[match.start() : match.end()]:
            return match.span()
    return None


def _copies(text: str) -> Iterator[_Copy]:
    folded = fold(text, confusables=True, lower=True, strip_accents=True)
    plain = _Copy(folded.text, folded.starts, folded.ends)
    leet = _leet(plain)
    seen: set[tuple[str, bool]] = set()
    for copy in (_squeeze(plain), leet and _squeeze(leet), _mend(plain), leet and _mend(leet)):
        if copy is None or (copy.text, copy.changed is None) in seen:
            continue
        seen.add((copy.text, copy.changed is None))
        yield copy


def _leet(copy: _Copy) -> _Copy | None:
    """Leetspeak undone inside words that mix letters with digits or symbols ("1gn0r3", "4ll"); plain
    numbers stay numbers. None when there is no such word."""
    text = copy.text
    chars = list(text)
    changed = ["0"] * len(text)
    for match in _TOKEN.finditer(text):
        word = match.group().rstrip("!")
        if not any(c.isalpha() for c in word) or word.isalpha():
            continue
        for offset, char in enumerate(word):
            swapped = char.translate(_LEET)
            if swapped != char:
                chars[match.start() + offset] = swapped
                changed[match.start() + offset] = "1"
    if "1" not in changed:
        return None
    return _Copy("".join(chars), copy.starts, copy.ends, "".join(changed))


def _squeeze(copy: _Copy) -> _Copy:
    """Runs of spaces and tabs as one space (line breaks stay: a rule stops at a sentence's end)."""
    text = copy.text
    if "  " not in text and "\t" not in text:
        return copy
    kept = copy.keep([i for i, c in enumerate(text) if not (c in " \t" and i and text[i - 1] in " \t")])
    if "\t" in kept.text:
        kept = _Copy(kept.text.replace("\t", " "), kept.starts, kept.ends, kept.changed)
    return kept


def _mend(copy: _Copy) -> _Copy | None:
    """Letter-spaced words joined ("i g n o r e", "i.g.n.o.r.e": in "i g n o r e  a l l" the double
    space still separates the words), words broken by a hyphen or a line break joined ("ig-nore"),
    then spaces squeezed. None when nothing needed mending."""
    text = copy.text
    drop: set[int] = set()
    for match in _SPACED.finditer(text):
        drop.update(match.start() + i for i, c in enumerate(match.group()) if c in " .-_*")
    for match in _BROKEN.finditer(text):
        drop.update(range(match.start(), match.end()))
    if not drop:
        return None
    mended = copy.keep([i for i in range(len(text)) if i not in drop])
    return _squeeze(mended)


# --- hidden payloads ------------------------------------------------------------------------------


def _decoded(text: str) -> Iterator[tuple[str, tuple[int, int]]]:
    """Decoded payloads hidden in `text`, each with the span of the original it was decoded from."""
    for match in _TAGS.finditer(text):
        yield "".join(chr(ord(c) - 0xE0000) for c in match.group()), match.span()
    plain = fold(text)
    for match in _BASE64.finditer(plain.text):
        blob = match.group().replace("-", "+").replace("_", "/")
        if blob.isalpha() and (blob.islower() or blob.isupper()):
            continue  # a long word, not an encoding
        try:
            raw = base64.b64decode(blob + "=" * (-len(blob) % 4), validate=False)
        except (binascii.Error, ValueError):
            continue
        decoded = _printable(raw)
        if decoded:
            yield decoded, plain.source_span(*match.span())
    for match in _HEX.finditer(plain.text):
        digits = re.sub(r"[ :]", "", match.group())
        if len(digits) % 2:
            digits = digits[:-1]
        decoded = _printable(bytes.fromhex(digits))
        if decoded:
            yield decoded, plain.source_span(*match.span())
    for match in _PERCENT.finditer(plain.text):
        decoded = urllib.parse.unquote(match.group())
        yield decoded, plain.source_span(*match.span())
    if _MENTIONS_ROT.search(plain.text) or _reads_better_in_rot13(plain.text):
        yield codecs.decode(plain.text, "rot13"), (0, len(text))
    if _MENTIONS_REVERSE.search(plain.text):
        yield plain.text[::-1], (0, len(text))


_COMMON_WORDS = frozenset(
    "the and you your all to of is in it this that for me my are be a an not now with what how ignore "
    "previous instructions system prompt print reveal rules say tell".split()
)


def _reads_better_in_rot13(text: str) -> bool:
    """ROT13 sent without a word about it: the rotated words are common English, the originals not."""
    words = re.findall(r"[a-z]+", text.lower())
    if len(words) < 4:
        return False
    plain = sum(w in _COMMON_WORDS for w in words)
    rotated = sum(codecs.decode(w, "rot13") in _COMMON_WORDS for w in words)
    return rotated >= 2 and rotated > 2 * plain


def _printable(raw: bytes) -> str | None:
    try:
        decoded = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if len(decoded) < 8 or sum(c.isprintable() or c.isspace() for c in decoded) / len(decoded) < 0.9:
        return None
    if sum(c.isalpha() or c.isspace() for c in decoded) / len(decoded) < 0.6:
        return None
    return decoded
