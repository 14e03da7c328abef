"""Personal data written so that a plain pattern misses it, found only where it is unambiguous.

- E-mail addresses spelled out: "john.doe [at] example [dot] com", "jdoe(at)example(dot)de",
  "john.doe AT example DOT com", "john.doe [at] example.com". A bracketed "[at]", "(at)", "{at}",
  "(@)" is unambiguous. A bare "at" ... "dot" is prose as often as not ("meet me at the station dot
  five"), so it counts only when the last label is a known top-level domain and the name before "at"
  looks like a mailbox (it holds a dot, digit, "_" or "-") or an e-mail word comes just before
  ("E-mail: john at example dot com").
- US social security numbers without dashes ("123456789", "123 45 6789", "123.45.6789"), only right
  after "SSN", "SS#" or "social security (number)"; the number must be one the SSA issues (no area
  000, 666 or 9xx, no group 00, no serial 0000).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

Span = tuple[int, int]

_TLDS = (
    "com|org|net|edu|gov|mil|int|info|biz|io|co|ai|app|dev|me|eu|uk|us|ca|au|nz|ie|de|at|ch|fr|be|lu"
    "|es|pt|it|nl|se|no|dk|fi|pl|cz|br|mx|ar|in|jp|cn|ru|tv"
)
_OPEN, _CLOSE = r"[\[({<]", r"[\])}>]"
_AT_BRACKETED = rf"\s?{_OPEN}\s?(?:at|@)\s?{_CLOSE}\s?"
_DOT_BRACKETED = rf"\s?{_OPEN}\s?(?:dot|\.)\s?{_CLOSE}\s?"
_LOCAL = r"(?<![\w.@'’-])[A-Za-z0-9](?:[\w.+-]{0,62}[A-Za-z0-9])?"
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_BRACKETED = re.compile(
    rf"(?i){_LOCAL}{_AT_BRACKETED}{_LABEL}(?:(?:{_DOT_BRACKETED}|\.){_LABEL})*(?:{_DOT_BRACKETED}|\.)"
    rf"[A-Za-z]{{2,24}}(?![\w-])"
)
_BARE = re.compile(
    rf"(?<![\w.@'’-])(?P<local>[A-Za-z0-9](?:[\w.+-]{{0,62}}[A-Za-z0-9])?) (?:at|AT) "
    rf"{_LABEL}(?: (?:dot|DOT) {_LABEL})*? (?:dot|DOT) (?:{_TLDS}|{_TLDS.upper()})(?![\w-])"
)
_EMAIL_WORD = re.compile(r"(?i)\b(?:e-?mail|mail|courriel|correo|e-?mail-?adresse)\b\W{0,5}$")

_SSN_BARE = re.compile(r"(?<![\w.-])(?!000|666|9)\d{3}([ .]?)(?!00)\d{2}\1(?!0000)\d{4}(?![\w-]|\.\d)")
SSN_CUE = re.compile(
    r"(?i)\b(?:ssn|ss#|ss ?no\.?|social[ -]security(?: (?:number|no\.?|#))?|soc\.? ?sec\.?(?: no\.?)?)"
    r"(?:\s|[:#.,]|\bis\b|\bwas\b|\bnumber\b|\bof\b)*$"
)


_BRACKETED_AT = re.compile(rf"(?i){_OPEN}\s?(?:at|@)\s?{_CLOSE}")


def spelled_emails(text: str) -> Iterator[Span]:
    if _BRACKETED_AT.search(text):
        yield from (m.span() for m in _BRACKETED.finditer(text))
    lowered = text.lower()
    if " at " not in lowered or " dot " not in lowered:
        return
    for match in _BARE.finditer(text):
        local = match.group("local")
        cue = _EMAIL_WORD.search(text[max(0, match.start() - 20) : match.start()])
        if re.search(r"[\d._+-]", local) or cue:
            yield match.span()


def bare_ssns(text: str) -> Iterator[Span]:
    lowered = text.lower()
    if "ss" not in lowered and "soc" not in lowered:
        return
    for match in _SSN_BARE.finditer(text):
        line_start = text.rfind("\n", 0, match.start()) + 1
        if SSN_CUE.search(text[max(line_start, match.start() - 30) : match.start()]):
            yield match.span()
