"""Detection copies of a text, with a map back to the original: detectors read the copy, and what
they find is applied to the text the user wrote.

`fold(text)` returns a `Folded`: the copy (invisible, bidi and tag characters dropped; each cluster
of a character and its combining marks NFKC-normalised, so fullwidth "４１１１" reads "4111" and "ｉ"
reads "i"; every kind of space made " ", every dash "-", digits of other scripts made ASCII) and,
for each character of the copy, the span of the original it came from. `Folded.source_span` maps a
span found in the copy back to the original, so a redaction covers exactly the characters the user
typed, invisible ones inside included.

With `confusables=True` letters from Cyrillic, Greek and Armenian that look like Latin ones are
folded to the Latin letter, but only inside a word that also holds a Latin letter, or whose letters
all have a Latin look-alike ("Іgnоrе", "ѕсоре"): a Russian sentence stays Russian. `lower=True`
lower-cases the copy (casefold), one character at a time, so the map stays exact.

`strip_invisible(text)` is the storage-side cousin used by UnicodeNormalizer: it removes only what
smuggles (see `INVISIBLE`, bidi controls and tag characters) and keeps a zero-width joiner or
non-joiner inside a word of a script that needs it (Persian, Arabic, the Indic scripts, Sinhala) and
a joiner between two emoji. It never changes a visible character.

Bidi controls are kept where right-to-left text needs them (`legitimate_bidi`), on a line that holds
a right-to-left letter (Hebrew, Arabic, Syriac, Thaana, ...): a mark (LRM, RLM, ALM) unless it sits
inside a word, between two letters of the same direction; an embedding or isolate that is closed on
its line, a right-to-left one (RLE, RLI) only around right-to-left letters. Overrides (LRO, RLO),
which change the order of what is shown, are always removed, as is every bidi control on a line
with no right-to-left letter.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

ZWNJ, ZWJ = "\u200c", "\u200d"
# Invisible characters that carry no meaning in text a person typed: zero-width space, soft hyphen,
# Mongolian vowel separator, word joiner and invisible operators, BOM / zero-width no-break space,
# Hangul fillers (used for blank-looking names), combining grapheme joiner.
INVISIBLE = frozenset("\u00ad\u034f\u115f\u1160\u180e\u200b\u2060\u2061\u2062\u2063\u2064\ufeff\u3164\uffa0")
# Bidirectional embeddings, overrides, isolates and marks ("Trojan Source" reordering).
BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
_MARKS = frozenset("\u061c\u200e\u200f")
_EMBEDDINGS = frozenset("\u202a\u202b\u202d\u202e")  # closed by PDF (U+202C)
_ISOLATES = frozenset("\u2066\u2067\u2068")  # closed by PDI (U+2069)
_OVERRIDES = frozenset("\u202d\u202e")
_RIGHT_TO_LEFT_OPENERS = frozenset("\u202b\u2067")
CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ufff9-\ufffb]")
TAGS = re.compile("[\U000e0000-\U000e007f]+")
FLAG_TAGS = re.compile("\U0001f3f4[\U000e0020-\U000e007e]+\U000e007f")

_SPACES = frozenset(
    "\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u202f\u205f\u3000"
)
_DASHES = frozenset("\u2010\u2011\u2012\u2013\u2014\u2015\u2212\ufe58\ufe63\uff0d")
_QUOTES = {
    "\u2018": "'", "\u2019": "'", "\u201a": "'", "\u201b": "'", "\u201c": '"', "\u201d": '"',
    "\u00ab": '"', "\u00bb": '"', "\u2039": "'", "\u203a": "'",
}  # fmt: skip

# Letters of other scripts that render like Latin ones (a subset of Unicode's confusables that
# matters for words an attacker re-spells).
CONFUSABLES = {
    # Cyrillic
    "а": "a", "в": "b", "е": "e", "ё": "e", "к": "k", "м": "m", "н": "h", "о": "o", "р": "p", "с": "c",
    "т": "t", "у": "y", "х": "x", "ѕ": "s", "і": "i", "ї": "i", "ј": "j", "ԁ": "d", "ԛ": "q", "ԝ": "w",
    "һ": "h", "ӏ": "l", "г": "r", "п": "n", "ь": "b",
    "А": "A", "В": "B", "Е": "E", "К": "K", "М": "M", "Н": "H", "О": "O", "Р": "P", "С": "C", "Т": "T",
    "У": "Y", "Х": "X", "Ѕ": "S", "І": "I", "Ј": "J", "Ԁ": "D", "Ԛ": "Q", "Ԝ": "W", "Һ": "H", "Ӏ": "I",
    # Greek
    "α": "a", "ε": "e", "ι": "i", "κ": "k", "ν": "v", "ο": "o", "ρ": "p", "τ": "t", "υ": "u", "χ": "x",
    "Α": "A", "Β": "B", "Ε": "E", "Ζ": "Z", "Η": "H", "Ι": "I", "Κ": "K", "Μ": "M", "Ν": "N", "Ο": "O",
    "Ρ": "P", "Τ": "T", "Υ": "Y", "Χ": "X",
    # Armenian, Latin small capitals and other look-alikes
    "օ": "o", "ո": "n", "ս": "u", "հ": "h", "ɡ": "g", "ɑ": "a", "ı": "i", "ȷ": "j", "ʏ": "y",
}  # fmt: skip

# Scripts in which a zero-width (non-)joiner inside a word changes how it is written.
_JOINING_RANGES = (
    (0x0600, 0x06FF),  # Arabic (Persian, Urdu)
    (0x0700, 0x074F),  # Syriac
    (0x0750, 0x077F),  # Arabic supplement
    (0x0860, 0x08FF),  # Arabic extended
    (0x0900, 0x0DFF),  # Devanagari ... Sinhala (the Indic scripts)
    (0x0F00, 0x0FFF),  # Tibetan
    (0x1000, 0x109F),  # Myanmar
    (0x1780, 0x18AF),  # Khmer, Mongolian
    (0xA8E0, 0xA8FF),  # Devanagari extended
    (0xFB50, 0xFDFF),  # Arabic presentation forms A
    (0xFE70, 0xFEFF),  # Arabic presentation forms B
)


@dataclass(frozen=True, slots=True)
class Folded:
    """A detection copy: `text`, and for each of its characters the original span it came from."""

    source: str
    text: str
    starts: tuple[int, ...]
    ends: tuple[int, ...]

    def source_span(self, start: int, end: int) -> tuple[int, int]:
        """The original span behind copy[start:end] (end exclusive, start < end)."""
        return self.starts[start], self.ends[end - 1]

    @property
    def unchanged(self) -> bool:
        return self.text == self.source


def fold(text: str, *, confusables: bool = False, lower: bool = False, strip_accents: bool = False) -> Folded:
    """The detection copy of `text` (see the module docstring); `strip_accents` also drops the
    combining marks of each folded character ("précédentes" reads "precedentes")."""
    return _fold(text, confusables, lower, strip_accents)


def _fold(text: str, confusables: bool, lower: bool, strip_accents: bool) -> Folded:
    if text.isascii() and not CONTROL.search(text):
        n = len(text)
        return Folded(text, text.lower() if lower else text, tuple(range(n)), tuple(range(1, n + 1)))
    keep_tags = {i for m in FLAG_TAGS.finditer(text) for i in range(m.start(), m.end())}
    chars: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    index, n = 0, len(text)
    while index < n:
        char = text[index]
        end = index + 1
        while end < n and unicodedata.combining(text[end]):
            end += 1
        if _dropped(char, index, text, keep_tags):
            index += 1
            continue
        cluster = _fold_cluster(text[index:end])
        for out in cluster:
            for piece in _finish(out, lower, strip_accents):
                chars.append(piece)
                starts.append(index)
                ends.append(end)
        index = end
    folded = "".join(chars)
    if confusables:
        folded = _fold_confusables(folded)  # one character for one: the map stays exact
    return Folded(text, folded, tuple(starts), tuple(ends))


def _finish(char: str, lower: bool, strip_accents: bool) -> str:
    if lower:
        char = char.casefold()
    if strip_accents and not char.isascii():
        char = "".join(c for c in unicodedata.normalize("NFKD", char) if not unicodedata.combining(c))
    return char


def _dropped(char: str, index: int, text: str, keep_tags: set[int]) -> bool:
    if char in INVISIBLE or char in BIDI or char in (ZWJ, ZWNJ):
        return True
    if "\U000e0000" <= char <= "\U000e007f":
        return index not in keep_tags
    return bool(CONTROL.match(char))


def _fold_cluster(cluster: str) -> str:
    char = cluster[0]
    if char in _SPACES:
        return " "
    if char in _DASHES:
        return "-"
    if char in _QUOTES:
        return _QUOTES[char]
    if len(cluster) == 1 and char.isdigit() and not char.isascii():
        value = unicodedata.decimal(char, None)
        if value is not None:
            return str(value)
    out = unicodedata.normalize("NFKC", cluster)
    # NFKC may map a space-like or dash-like character to one we fold further ("\u2007" is fine).
    return "".join(" " if c in _SPACES else "-" if c in _DASHES else c for c in out)


_WORD = re.compile(r"[^\W\d_]+")


def _fold_confusables(text: str) -> str:
    def word(match: re.Match[str]) -> str:
        value = match.group()
        if value.isascii():
            return value
        has_latin = any("a" <= c.lower() <= "z" for c in value)
        if has_latin or all(c in CONFUSABLES for c in value):
            return "".join(CONFUSABLES.get(c, c) for c in value)
        return value

    return _WORD.sub(word, text)


# --- storage side ---------------------------------------------------------------------------------


def strip_invisible(
    text: str, *, strip_control: bool = True, remove_zero_width: bool = True, keep_rtl_bidi: bool = True
) -> str:
    """`text` without the characters that smuggle (see the module docstring). Visible characters,
    joiners that a script needs and (with `keep_rtl_bidi`) the bidi controls right-to-left text needs
    are never touched."""
    if text.isascii() and not CONTROL.search(text):
        return text
    keep_tags = {i for m in FLAG_TAGS.finditer(text) for i in range(m.start(), m.end())}
    keep_bidi = legitimate_bidi(text) if strip_control and keep_rtl_bidi else set()
    out: list[str] = []
    for index, char in enumerate(text):
        if strip_control and char in BIDI and index not in keep_bidi:
            continue
        if strip_control and CONTROL.match(char):
            continue
        if strip_control and "\U000e0000" <= char <= "\U000e007f" and index not in keep_tags:
            continue
        if remove_zero_width:
            if char in INVISIBLE:
                continue
            if char in (ZWJ, ZWNJ) and not _joiner_needed(text, index):
                continue
        out.append(char)
    return "".join(out)


def _right_to_left(char: str) -> bool:
    return char not in _MARKS and unicodedata.bidirectional(char) in ("R", "AL")  # RLM itself is "R"


def legitimate_bidi(text: str) -> set[int]:
    """The indexes of the bidi controls in `text` that right-to-left text needs (module docstring)."""
    if not any(_right_to_left(c) for c in text if not c.isascii()):
        return set()
    keep: set[int] = set()
    start = 0
    for line in re.split(r"(?<=[\n\r\u2029])", text):
        if any(_right_to_left(c) for c in line):
            keep |= {start + i for i in _line_bidi(line)}
        start += len(line)
    return keep


def _line_bidi(line: str) -> set[int]:
    keep: set[int] = set()
    stack: list[int] = []
    for index, char in enumerate(line):
        if char in _MARKS:
            if not _inside_a_word(line, index):
                keep.add(index)
        elif char in _EMBEDDINGS or char in _ISOLATES:
            stack.append(index)
        elif char in ("\u202c", "\u2069"):
            openers = _ISOLATES if char == "\u2069" else _EMBEDDINGS
            # A PDI closes its isolate and every embedding opened inside it; a PDF only the
            # embedding on top.
            while stack and line[stack[-1]] not in openers and char == "\u2069":
                stack.pop()
            if not stack or line[stack[-1]] not in openers:
                continue
            opened = stack.pop()
            opener = line[opened]
            inner = line[opened + 1 : index]
            if opener in _OVERRIDES:
                continue
            if opener in _RIGHT_TO_LEFT_OPENERS and not any(_right_to_left(c) for c in inner):
                continue
            keep.update((opened, index))
    return keep


def _inside_a_word(text: str, index: int) -> bool:
    """Between two letters of the same direction: a mark there only splits a word."""
    before, after = _neighbour(text, index, -1), _neighbour(text, index, 1)
    if not (before.isalpha() and after.isalpha()):
        return False
    return _right_to_left(before) == _right_to_left(after)


def _joiner_needed(text: str, index: int) -> bool:
    before = _neighbour(text, index, -1)
    after = _neighbour(text, index, 1)
    if not before or not after:
        return False
    if text[index] == ZWJ and is_emoji(before) and is_emoji(after):
        return True
    return _joining_script(before) and _joining_script(after)


def _neighbour(text: str, index: int, step: int) -> str:
    """The nearest character in direction `step`, skipping other invisible characters."""
    index += step
    while 0 <= index < len(text):
        char = text[index]
        if char not in INVISIBLE and char not in (ZWJ, ZWNJ):
            return char
        index += step
    return ""


def _joining_script(char: str) -> bool:
    code = ord(char)
    return any(low <= code <= high for low, high in _JOINING_RANGES)


def is_emoji(char: str) -> bool:
    code = ord(char)
    return code >= 0x1F000 or 0x2600 <= code <= 0x27BF or code == 0xFE0F or unicodedata.category(char) == "So"
