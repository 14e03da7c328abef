"""How much of the streamed text PIIDetector holds back: the shortest tail that could still grow into a
match. The buffering itself is `memproc.guardrails._stream`'s."""

from __future__ import annotations

import re

from memproc.guardrails._pii_patterns import Match
from memproc.guardrails._pii_secrets import TRAILING_KEY

_TRAILING_WORD = re.compile(r"\S*\Z")
# Digit groups that a phone, card or IBAN may continue ("+44 20 7946 ", "DE89 3704 ").
_TRAILING_GROUPS = re.compile(r"(?:(?<!\S)[+(]?(?=[0-9A-Z)]*\d)[0-9A-Z]{1,6}\)?[ .\-/]){1,9}\S*\Z")
# An e-mail address being spelled out ("john.doe [at] example [dot] ", "jdoe at mail dot ").
_TRAILING_SPELLED = re.compile(
    r"(?i)[\w.+-]+ ?(?:[\[({<] ?(?:at|@) ?[\])}>]|\bat\b) ?"
    r"(?:[\w-]+ ?(?:[\[({<] ?(?:dot|\.) ?[\])}>]|\bdot\b|\.)? ?){0,6}\Z"
)


def hold_start(
    pending: str, matches: list[Match], *, hold_chars: int, max_word: int, custom_patterns: bool
) -> int:
    """Where the held tail starts: the shortest tail that could still grow into a match (the
    unfinished last word, up to `max_word`; a run of digit groups such as "+44 20 7946 ";
    a "password = " or "Authorization: Bearer " awaiting its value; "john [at] example [dot] "),
    or the last `hold_chars` characters when custom patterns of unknown shape are configured; never
    inside a match."""
    size = len(pending)
    starts = [_TRAILING_WORD.search(pending).start()]  # type: ignore[union-attr]
    for tail in (_TRAILING_GROUPS, TRAILING_KEY, _TRAILING_SPELLED):
        found = tail.search(pending, max(0, size - 2 * hold_chars))
        if found:
            starts.append(found.start())
    if custom_patterns:
        starts.append(size - hold_chars)
    hold = max(0, min(starts), size - max_word)
    for match in matches:
        if match.start < hold < match.end:
            hold = match.start
    return hold
