"""Offline PII detection: regular expressions, narrowed by checksums and by context.

Each detector returns (start, end) spans of the detection copy `find` gives it. Card numbers must pass
the Luhn check and fit the length of the card network their first digits name (Visa, Mastercard,
Amex, Discover, JCB, Diners, UnionPay, Maestro); IBANs the ISO 13616 mod-97 check and the country's
length; IP addresses the `ipaddress` parser; phone numbers one of the national conventions of
`_pii_phone`; SSNs need the dashes, or "SSN" / "social security" just before them (`_pii_spelled`,
which also reads e-mail addresses spelled "name [at] domain [dot] com"); secrets are the values after
a password, token or secret name (`_pii_secrets`), API keys a vendor's key shape or the value after an
API-key name. A number right after an identifier cue ("order", "tracking",
"version", "Aktenzeichen"; see `_pii_context`) is not a card, a phone number or an IPv4 address.
`find` maps the spans back onto the original text and resolves overlaps: the longest span wins,
then the earlier type in `TYPES`.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from memproc.guardrails._normalize import fold
from memproc.guardrails._pii_context import context
from memproc.guardrails._pii_phone import phones
from memproc.guardrails._pii_secrets import api_key_values, secrets
from memproc.guardrails._pii_spelled import bare_ssns, spelled_emails

Span = tuple[int, int]
Detector = Callable[[str], Iterator[Span]]

# In priority order for overlapping spans of equal length.
TYPES = ("email", "credit_card", "iban", "us_ssn", "api_key", "secret", "ip_address", "phone")
MODEL_ONLY_TYPES = ("name", "address", "date_of_birth")
DEFAULT_TYPES = TYPES
ALIASES = {
    "credit-card": "credit_card",
    "creditcard": "credit_card",
    "card": "credit_card",
    "ssn": "us_ssn",
    "us-ssn": "us_ssn",
    "ip-address": "ip_address",
    "ip": "ip_address",
    "api-key": "api_key",
    "date-of-birth": "date_of_birth",
    "dob": "date_of_birth",
    "phone_number": "phone",
    "email_address": "email",
    "password": "secret",
    "credential": "secret",
    "credentials": "secret",
}


@dataclass(frozen=True, slots=True)
class Match:
    type: str
    start: int
    end: int

    @property
    def length(self) -> int:
        return self.end - self.start


def _spans(pattern: re.Pattern[str], check: Callable[[str], bool] | None = None) -> Detector:
    def detect(text: str) -> Iterator[Span]:
        for m in pattern.finditer(text):
            group = "value" if "value" in pattern.groupindex else 0
            if check is None or check(m.group(group)):
                yield m.span(group)

    return detect


_EMAIL = re.compile(
    r"(?<![\w.%+-])[\w%+-](?:[\w.%+-]{0,62}[\w%+-])?"
    r"@(?:[^\W_](?:[\w-]{0,61}[^\W_])?\.)+[^\W\d_]{2,24}(?![\w-])"
)

_CARD = re.compile(r"(?<![\w-])(?:\d[ -]?){11,18}\d(?!\d)")  # not glued to letters ("SBIN5678...")

_SSN = re.compile(r"(?<![\d-])(?!000|666|9\d\d)\d{3}-(?!00)\d{2}-(?!0000)\d{4}(?![\d-])")

_IPV4 = re.compile(
    r"(?<![\w.])(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(?!\w|\.\d)"
)
_IPV6 = re.compile(r"(?<![\w:])[0-9A-Fa-f:]{2,39}(?:(?<=:)(?:\d{1,3}\.){3}\d{1,3})?(?![\w:])")

_API_KEY = re.compile(
    r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}"  # OpenAI, Anthropic
    r"|\b[sprk]k_(?:live|test)_[A-Za-z0-9]{16,}"  # Stripe
    r"|\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"  # AWS access key id
    r"|\bgh[pousr]_[A-Za-z0-9]{36,}\b|\bgithub_pat_[A-Za-z0-9_]{40,}"  # GitHub
    r"|\bxox[abprs]-[A-Za-z0-9-]{10,}"  # Slack
    r"|\bAIza[0-9A-Za-z_-]{35}"  # Google
    r"|\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"  # JWT
)
_IBAN = re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,32}")
# ISO 13616 lengths (SWIFT IBAN registry); other countries are tried from 34 down to 15 characters.
IBAN_LENGTHS = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22, "BH": 22, "BR": 29,
    "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22, "DK": 18, "DO": 28, "EE": 20, "EG": 29,
    "ES": 24, "FI": 18, "FO": 18, "FR": 27, "GB": 22, "GE": 22, "GI": 23, "GL": 18, "GR": 27, "GT": 28,
    "HR": 21, "HU": 28, "IE": 22, "IL": 23, "IQ": 23, "IS": 26, "IT": 27, "JO": 30, "KW": 30, "KZ": 20,
    "LB": 28, "LC": 32, "LI": 21, "LT": 20, "LU": 20, "LV": 21, "MC": 27, "MD": 24, "ME": 22, "MK": 19,
    "MR": 27, "MT": 31, "MU": 30, "NL": 18, "NO": 15, "PK": 24, "PL": 28, "PS": 29, "PT": 25, "QA": 29,
    "RO": 24, "RS": 22, "SA": 24, "SC": 31, "SE": 24, "SI": 19, "SK": 24, "SM": 27, "ST": 25, "SV": 28,
    "TL": 23, "TN": 24, "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20,
}  # fmt: skip


def luhn_valid(digits: str) -> bool:
    total = 0
    for index, char in enumerate(reversed(digits)):
        value = int(char)
        if index % 2:
            value = value * 2 - 9 if value > 4 else value * 2
        total += value
    return total % 10 == 0


def _brand_length_ok(digits: str) -> bool:
    """The number's length fits the card network its first digits (IIN) name."""
    n = len(digits)
    two, three, four = int(digits[:2]), int(digits[:3]), int(digits[:4])
    if digits[0] == "4":  # Visa
        return n in (13, 16, 19)
    if 51 <= two <= 55 or 2221 <= four <= 2720:  # Mastercard
        return n == 16
    if two in (34, 37):  # American Express
        return n == 15
    if four == 6011 or 644 <= three <= 649 or two == 65:  # Discover
        return 16 <= n <= 19
    if two == 35:  # JCB (3528-3589 assigned; the rest of 35 is read as JCB too)
        return 16 <= n <= 19
    if 300 <= three <= 305 or two in (36, 38, 39):  # Diners Club
        return 14 <= n <= 19
    if two == 62:  # UnionPay
        return 16 <= n <= 19
    if two == 50 or 56 <= two <= 69:  # Maestro
        return 12 <= n <= 19
    return False


def _card_valid(digits: str) -> bool:
    return 12 <= len(digits) <= 19 and _brand_length_ok(digits) and luhn_valid(digits)


def _cards(text: str) -> Iterator[Span]:
    for m in _CARD.finditer(text):
        if context(text, m.start()) == "id":  # "tracking 1234 ...": a card cue is fine here
            continue
        # The pattern may run on into a following number ("4111 ... 1111 123-45-6789"): try the
        # longest prefix that ends at a digit and passes the checks.
        ends = [m.start() + i + 1 for i, c in enumerate(m.group()) if c.isdigit()]
        for count in range(min(19, len(ends)), 11, -1):
            end = ends[count - 1]
            if end < len(text) and text[end].isdigit():
                continue
            if _card_valid(re.sub(r"\D", "", text[m.start() : end])):
                yield m.start(), end
                break


def iban_valid(iban: str) -> bool:
    iban = iban.replace(" ", "").upper()
    if not re.fullmatch(r"[A-Z]{2}\d{2}[A-Z0-9]{11,30}", iban):
        return False
    expected = IBAN_LENGTHS.get(iban[:2])
    if expected is not None and len(iban) != expected:
        return False
    rearranged = iban[4:] + iban[:4]
    return int("".join(str(int(c, 36)) for c in rearranged)) % 97 == 1


def _iban(text: str) -> Iterator[Span]:
    for m in _IBAN.finditer(text):
        start = m.start()
        # Positions just past each alphanumeric character of the candidate, for cutting it short:
        # the pattern also swallows a following uppercase word or number ("... 0130 00 OK").
        ends = [start + i + 1 for i, c in enumerate(m.group()) if c != " "]
        expected = IBAN_LENGTHS.get(m.group()[:2])
        lengths = [expected] if expected else range(min(34, len(ends)), 14, -1)
        for length in lengths:
            if length > len(ends):
                continue
            end = ends[length - 1]
            if end < len(text) and text[end].isalnum():
                continue
            if iban_valid(text[start:end]):
                yield start, end
                break


def _ipv4(text: str) -> Iterator[Span]:
    for m in _IPV4.finditer(text):
        if context(text, m.start()) != "id":  # "version 1.2.3.4", "build 10.0.0.1"
            yield m.span()


def _ipv6(text: str) -> Iterator[Span]:
    for m in _IPV6.finditer(text):
        value = m.group()
        if value.count(":") < 2 or len(value) < 6:
            continue
        try:
            ipaddress.IPv6Address(value)
        except ValueError:
            continue
        yield m.span()


def _chain(*detectors: Detector) -> Detector:
    def detect(text: str) -> Iterator[Span]:
        for detector in detectors:
            yield from detector(text)

    return detect


DETECTORS: dict[str, Detector] = {
    "email": _chain(_spans(_EMAIL), spelled_emails),
    "phone": phones,
    "credit_card": _cards,
    "iban": _iban,
    "ip_address": _chain(_ipv4, _ipv6),
    "us_ssn": _chain(_spans(_SSN), bare_ssns),
    "api_key": _chain(_spans(_API_KEY), api_key_values),
    "secret": secrets,
}


def custom_detector(pattern: re.Pattern[str]) -> Detector:
    """A user pattern; a group named "value" marks the part to redact (as in `password=(?P<value>...)`)."""
    return _spans(pattern)


def find(text: str, detectors: Mapping[str, Detector], extra: Iterable[Match] = ()) -> list[Match]:
    """Non-overlapping matches in `text`, in text order. The detectors read a detection copy of the
    text (`memproc.guardrails._normalize.fold`: fullwidth digits, invisible characters inside a
    number and non-breaking spaces folded) and their spans are mapped back onto `text`, so a redaction
    covers what the user typed. `extra` matches (a judge model's) are already in `text` coordinates."""
    folded = fold(text)
    candidates = [
        Match(kind, *folded.source_span(s, e))
        for kind, detect in detectors.items()
        for s, e in detect(folded.text)
        if e > s
    ]
    candidates.extend(extra)
    return resolve(candidates, tuple(detectors))


def resolve(candidates: Iterable[Match], types: Sequence[str]) -> list[Match]:
    """Overlaps resolved: the longest span wins, then the type listed first in `types`."""
    order = {kind: i for i, kind in enumerate(types)}
    candidates = sorted(candidates, key=lambda m: (-m.length, order.get(m.type, len(order)), m.start))
    kept: list[Match] = []
    for match in candidates:
        if all(match.end <= k.start or match.start >= k.end for k in kept):
            kept.append(match)
    return sorted(kept, key=lambda m: m.start)


# --- redaction ------------------------------------------------------------------------------------


def mask(value: str, kind: str) -> str:
    """Keeps the shape and a little of the value, so a reader can still tell entries apart."""
    if kind == "email" and "@" in value:
        local, _, domain = value.rpartition("@")
        tld = domain.rsplit(".", 1)[-1]
        return f"{local[0]}{'*' * (len(local) - 1)}@{'*' * (len(domain) - len(tld) - 1)}.{tld}"
    if kind in ("phone", "credit_card", "us_ssn"):
        return _mask_chars(value, str.isdigit, keep_last=4)
    if kind == "iban":
        return value[:2] + _mask_chars(value[2:], str.isalnum, keep_last=4)
    if kind == "ip_address":
        return re.sub(r"[0-9A-Fa-f]", "*", value)
    if kind == "api_key" and len(value) > 8:
        return value[:4] + "*" * (len(value) - 4)
    return "*" * len(value)


def _mask_chars(value: str, which: Callable[[str], bool], *, keep_last: int) -> str:
    positions = [i for i, c in enumerate(value) if which(c)]
    hidden = set(positions[:-keep_last] if len(positions) > keep_last else positions)
    return "".join("*" if i in hidden else c for i, c in enumerate(value))


def hashed(value: str, kind: str) -> str:
    """A stable pseudonym: the same value gets the same token. Pseudonymous, not anonymous: a short
    or guessable value (a phone number) can be recovered by hashing candidates."""
    digest = hashlib.sha256(f"{kind}:{value}".encode()).hexdigest()[:10]
    return f"[{kind.upper()}:{digest}]"
