"""Phone numbers, by the conventions people write them in, narrowed by what the words before them say.

A candidate is a run of digit groups (separated by a space, ".", "-" or "/", with "(...)" around an
area code and "(0)" for a trunk prefix), read on the detection copy (fullwidth digits, invisible
characters and non-breaking spaces already folded). It is a phone number when it has one of these
shapes:

- international: "+" or "00", then 8 to 15 digits ("+44 20 7946 0958", "+49 (0)30 1234567", "+33612345678");
- national with a trunk "0" (most of Europe): 8 to 13 digits ("020 7946 0958", "030/1234567",
  "(0161) 496 0066", "06 12 34 56 78", "06.12.34.56.78", "02 2878 1930");
- North American: 10 digits grouped 3-3-4 ("(212) 555-0147", "212.555.0147", "1-800-555-0199");
- Spanish and Portuguese 9-digit numbers starting 6-9 ("612 345 678", "91 123 45 67", "912 345 678"),
  Portuguese landlines ("21 123 4567"); Italian mobiles ("333 123 4567").

The country code may also be written "(+34)", an area code in parentheses may run straight on
("(212)555-0147"), and an extension ("x1234", "ext. 12") belongs to the number. A number written
without separators ("0612345678", "612345678", "2125550147") counts only after a phone cue ("Tel.",
"call me on", "portable", "Handy", "telemóvel"). Any candidate right after an identifier cue ("order", "case",
"tracking", "Aktenzeichen", "dossier n°") is not a phone number, and neither are dates, four-part
dotted numbers (versions, addresses), ISBNs or numbers next to a currency sign.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from memproc.guardrails._pii_context import context

Span = tuple[int, int]

_GROUP = r"(?:\(\d{1,5}\)|\d+)"
_SEP = r"(?: ?[.\-/] ?| |(?<=\)))"  # after "(212)" the number may run straight on
_COUNTRY = r"(?:\+ ?|00(?=[1-9])|\(\+\d{1,3}\) ?)"
_EXTENSION = r"(?: ?(?:x|ext\.?|extn\.?) ?\d{1,6})"
_CANDIDATE = re.compile(
    rf"(?<![\w+@/.\-$€£¥%])(?<!\d[,.])(?:{_COUNTRY})?{_GROUP}(?:{_SEP}?\(0\){_SEP}?{_GROUP})?"
    rf"(?:{_SEP}{_GROUP})*(?P<ext>{_EXTENSION})?(?![\w%€$£])",
    re.IGNORECASE,
)
_DATE = re.compile(r"\d{1,4}[./\-]\d{1,2}[./\-]\d{2,4}|\d{4}[./\-]\d{2}")
_DOTTED_FOUR = re.compile(r"\d{1,3}(?:\.\d{1,3}){3}")
_CURRENCY_AFTER = re.compile(r"^\s?(?:€|\$|£|¥|eur\b|usd\b|gbp\b|chf\b|%|euros?\b|dollars?\b)", re.I)


def phones(text: str) -> Iterator[Span]:
    for match in _CANDIDATE.finditer(text):
        start, end = match.span()
        number_end = match.start("ext") if match.group("ext") else end
        candidate = text[start:number_end]
        if _CURRENCY_AFTER.match(text[end : end + 8]):
            continue
        if _is_phone(candidate, text, start):
            yield start, end


def _is_phone(candidate: str, text: str, start: int) -> bool:
    international = candidate.startswith(("+", "00", "(+"))
    body = candidate.lstrip("(+ ").replace(")", " ", 1) if candidate[:2] == "(+" else candidate.lstrip("+ ")
    if candidate.startswith("00"):
        body = body[2:]
    digits = re.sub(r"\D", "", body.replace("(0)", ""))
    n = len(digits)
    if n < 8 or n > 15 or _DATE.fullmatch(candidate) or _DOTTED_FOUR.fullmatch(candidate):
        return False
    if _isbn(candidate):
        return False
    cue = context(text, start)
    if cue in ("id", "card"):
        return False
    separated = bool(re.search(r"[ .\-/()]", candidate.strip("+")))
    groups = [len(g) for g in re.findall(r"\d+", candidate)]
    if international:
        return n >= 8
    if digits[0] == "0":
        return 8 <= n <= 13 and (separated or cue == "phone") and (n >= 9 or separated)
    if _north_american(digits, groups, candidate):
        return True
    if (
        n == 9
        and digits[0] in "6789"
        and (groups in ([3, 3, 3], [2, 3, 2, 2], [3, 2, 2, 2]) or cue == "phone")
    ):
        return True
    if n == 10 and digits[0] == "3" and (groups in ([3, 3, 4], [3, 7], [3, 4, 3]) or cue == "phone"):
        return True
    if n == 9 and digits[0] == "2" and groups == [2, 3, 4]:
        return True  # Portuguese landline "21 123 4567" ("212 345 678" only after a phone cue)
    return cue == "phone" and 8 <= n <= 13 and (separated or 9 <= n <= 11)


def _north_american(digits: str, groups: list[int], candidate: str) -> bool:
    if len(digits) == 11 and digits[0] == "1":
        digits, groups = digits[1:], groups[1:]
    if len(digits) != 10 or digits[0] not in "23456789" or digits[3] not in "23456789":
        return False
    return groups == [3, 3, 4] and bool(re.search(r"[ .\-()]", candidate))


def _isbn(candidate: str) -> bool:
    """A hyphenated ISBN-10 or ISBN-13 with a valid check digit."""
    groups = candidate.split("-")
    if len(groups) not in (4, 5):
        return False
    digits = re.sub(r"\D", "", candidate)
    if len(digits) == 10 and len(groups) == 4:
        return sum(int(c) * (10 - i) for i, c in enumerate(digits)) % 11 == 0
    if len(digits) == 13 and len(groups) == 5 and digits.startswith(("978", "979")):
        return sum(int(c) * (1 if i % 2 == 0 else 3) for i, c in enumerate(digits)) % 10 == 0
    return False
