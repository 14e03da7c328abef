"""How much of the streamed text PIIDetector holds back: the shortest tail that could still grow into a
match. The buffering itself is `memproc.guardrails._stream`'s."""

from __future__ import annotations

import re

from memproc.guardrails._pii_context import WINDOW as CONTEXT_CHARS
from memproc.guardrails._pii_context import cue as context_cue
from memproc.guardrails._pii_patterns import Match
from memproc.guardrails._pii_secrets import TRAILING_KEY
from memproc.guardrails._pii_spelled import SSN_CUE

_TRAILING_WORD = re.compile(r"\S*\Z")
# Digit groups that a phone, card or IBAN may continue ("+44 20 7946 ", "DE89 3704 ").
_TRAILING_GROUPS = re.compile(r"(?:(?<!\S)[+(]?(?=[0-9A-Z)]*\d)[0-9A-Z]{1,6}\)?[ .\-/]){1,9}\S*\Z")
# An e-mail address being spelled out: a mailbox-like word and the start of "[at]" ("john.doe [a"),
# a bracketed "[at]" and the domain so far ("john.doe [at] example [do"), or a bare "at" and the
# domain so far ("jdoe at mail dot exa"; after "look at the " it lets go at the next word).
_OPEN, _CLOSE = r"[\[({<]", r"[\])}>]"
_TRAILING_SPELLED = (
    re.compile(rf"(?i)(?<![\w.+-])[\w+-]*(?:[._+-]\w|\d)[\w.+-]* ?(?:{_OPEN} ?(?:at?|@)? ?|a|at)?\Z"),
    re.compile(
        rf"(?i)(?<![\w.+-])[\w.+-]+ ?{_OPEN} ?(?:at|@) ?{_CLOSE} ?"
        rf"(?:[\w-]+ ?(?:{_OPEN} ?(?:d|do|dot|\.)? ?{_CLOSE}?|\.)? ?){{0,6}}\Z"
    ),
    re.compile(r"(?i)(?<![\w.+-])[\w.+-]+ at(?: [\w-]+(?: dot [\w-]+)*)?(?: (?:d|do|dot)?)? ?\Z"),
)


def hold_start(
    pending: str, matches: list[Match], *, hold_chars: int, max_word: int, custom_patterns: bool
) -> int:
    """Where the held tail starts: the shortest tail that could still grow into a match (the
    unfinished last word, up to `max_word`; a run of digit groups such as "+44 20 7946 ";
    a "password = " or "Authorization: Bearer " awaiting its value; "john [at] example [dot] "),
    or the last `hold_chars` characters when custom patterns of unknown shape are configured; never
    inside a match. The words that decide what a number is ("Tel.", "call me at", "SSN", "order")
    are held with it, and a phone or SSN word is held until a number follows or the text moves on
    (for a phone word, 25 characters), so a value is never judged without them."""
    size = len(pending)
    starts = [_TRAILING_WORD.search(pending).start()]  # type: ignore[union-attr]
    for tail in (_TRAILING_GROUPS, TRAILING_KEY, *_TRAILING_SPELLED):
        found = tail.search(pending, max(0, size - 2 * hold_chars))
        if found:
            starts.append(found.start())
    if custom_patterns:
        starts.append(size - hold_chars)
    hold = max(0, min(starts), size - max_word)
    # A number still arriving, or one that may follow ("Tel. ", "my SSN is "), is read with the words
    # before it: hold them too.
    named = _cue_start(pending, hold)
    if named is not None and (named[0] != "id" or (hold < size and pending[hold] in _NUMBER_START)):
        hold = named[1]
    for match in matches:
        if match.start < hold < match.end:
            hold = match.start
        if match.start == hold and match.type in _NAMED_BY_CONTEXT:
            hold = _with_its_words(pending, hold)
    return hold


_NUMBER_START = frozenset("0123456789+(")
# Types that a value is only with the words before it ("passwd=", "SSN", "Tel.").
_NAMED_BY_CONTEXT = frozenset({"secret", "api_key", "us_ssn", "phone"})


def _cue_start(pending: str, hold: int) -> tuple[str, int] | None:
    """The kind of the words just before `hold` that name a number ("phone", "card", "id", "ssn")
    and the start of the word they begin in."""
    found = context_cue(pending, hold)
    ssn = SSN_CUE.search(pending, max(0, hold - CONTEXT_CHARS), hold)
    if ssn and (found is None or ssn.start() > found[1]):
        found = ("ssn", ssn.start())
    if found is None:
        return None
    start = found[1]
    while start > 0 and not pending[start - 1].isspace():
        start -= 1
    return found[0], start


def _with_its_words(pending: str, start: int) -> int:
    """Where to hold a match from so that the words before it come too: a secret, a dashless SSN or
    a phone number after a phone word is only a match with them ("passwd=", "SSN", "Tel.")."""
    line_start = pending.rfind("\n", 0, start) + 1
    hold = max(line_start, start - CONTEXT_CHARS)
    while hold > line_start and not pending[hold - 1].isspace():
        hold -= 1
    return hold
