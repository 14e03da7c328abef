"""Secrets named by the words before them: "password: hunter2", "passwd=...", "token=...",
"Authorization: Bearer ...", "API key: ...".

A key name (`SECRET_KEYS`, in the project's seven languages; `API_KEY_KEYS` for API keys), then ":",
"=", "is" or "was" (or "ist", "war", "est", "était", "es", "era", "è", "é", "lautet") and a value;
after a password word (`PASSWORD_KEYS`) the value may also follow with no connector ("with password
'Qr7!dke#39'"). Only the value is a match, so a redaction keeps the key name. The value must look like
one: not a placeholder ("********", "<your password>", "${DB_PASSWORD}", "os.environ[...]",
"required", "none", an earlier redaction); after a word or ":" a plain word ("incorrect",
"required") is read as prose, so the value needs a digit, a symbol or a capital after its first
letter; with no connector at all ("password reset", "password manager") it needs letters and a digit,
or a symbol or a capital inside it, and 6 characters; after "=" (configuration) any value of 4 or more
characters counts.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

Span = tuple[int, int]

SECRET_KEYS = (
    r"password",
    r"passwd",
    r"pwd",
    r"passphrase",
    r"passcode",
    r"secret",
    r"secret[_-]?key",
    r"client[_-]?secret",
    r"(?:access|auth|refresh|session|bearer|api|id)?[_-]?token",
    r"passwort",
    r"kennwort",
    r"mot de passe",
    r"mdp",
    r"contrase[nñ]a",
    r"wachtwoord",
    r"senha",
    r"palavra[- ]passe",
)
PASSWORD_KEYS = (
    r"password",
    r"passwd",
    r"pwd",
    r"passphrase",
    r"passcode",
    r"passwort",
    r"kennwort",
    r"mot de passe",
    r"contrase[nñ]a",
    r"wachtwoord",
    r"senha",
)
API_KEY_KEYS = (r"api[_ -]?key", r"apikey", r"x-api-key")
# A key may carry a prefix ("DB_PASSWORD", "github_token": "_" may come before it) and sit in quotes
# ('"password": ...').
_PREFIX = r"(?<![^\W_])"
# Cheap first look: text with none of these holds no key name (most text; the patterns cost more).
_HINTS = (
    "pass",
    "pwd",
    "secret",
    "token",
    "kennwort",
    "wachtwoord",
    "mdp",
    "contrase",
    "senha",
    "bearer",
    "authoriz",
)
_WORDS = r"is|was|ist|war|est|était|es|era|è|é|lautet"
_CONNECTOR = rf"[\"']?\s*(?P<connector>[:=]|\b(?:{_WORDS})\b:?)\s*[\"']?"
_VALUE = r"(?P<value>[^\s\"'`,;]{4,200})"


def _assignment(keys: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile(rf"(?i){_PREFIX}(?:{'|'.join(keys)})(?![^\W_]){_CONNECTOR}{_VALUE}")


_SECRET = _assignment(SECRET_KEYS)
_BARE_PASSWORD = re.compile(
    rf"(?i){_PREFIX}(?:{'|'.join(PASSWORD_KEYS)})(?![^\W_])(?P<connector>)\s+[\"'`]?{_VALUE}"
)
_API_KEY = _assignment(API_KEY_KEYS)
_AUTHORIZATION = re.compile(
    r"(?i)\b(?:authorization\s*[:=]\s*[\"']?(?:bearer|basic|token|digest)|bearer)\s+"
    r"(?P<value>[A-Za-z0-9._~+/-]{8,}=*)"
)
# A key name still waiting for its value at the end of a streamed text ("password = ").
TRAILING_KEY = re.compile(
    rf"(?i){_PREFIX}(?:{'|'.join((*SECRET_KEYS, *API_KEY_KEYS, r'authorization', r'bearer'))})"
    rf"(?![^\W_])[\"']?\s*(?:[:=]|\b(?:{_WORDS})\b)?\s*[\"']?(?:bearer|basic)?\s*"
    r"[^\s\"'`,;]*\Z"
)

_PLACEHOLDER = re.compile(
    r"(?i)^(?:[*•x.#?-]+|<.*|\[.*|\{.*|\(.*|\$.*|%.*|os\.\S*|process\.env\S*|env\W.*|getenv\S*"
    r"|none|null|nil|true|false|undefined|empty|required|optional|hidden|redacted|secret|password"
    r"|your[_-]?\w*|changeit|example|placeholder|xxx+|\w+\(.*)$"
)


def secrets(text: str) -> Iterator[Span]:
    """The values after a password, token or secret name, and after an Authorization header."""
    lowered = text.lower()
    if not any(hint in lowered for hint in _HINTS):
        return
    yield from _values(_SECRET, text)
    yield from _values(_BARE_PASSWORD, text)
    for match in _AUTHORIZATION.finditer(text):
        if not _PLACEHOLDER.match(match.group("value")):
            yield match.span("value")


def api_key_values(text: str) -> Iterator[Span]:
    """The values after an API-key name ("api_key=", "x-api-key:")."""
    lowered = text.lower()
    if "key" in lowered:
        yield from _values(_API_KEY, text)


def _values(pattern: re.Pattern[str], text: str) -> Iterator[Span]:
    for match in pattern.finditer(text):
        value = _trimmed(match.group("value"))
        if _looks_like_secret(value, match.group("connector")):
            start = match.start("value")
            yield start, start + len(value)


def _trimmed(value: str) -> str:
    """Without the sentence's full stop or a closing bracket the value did not open ("(pwd: x1y2z3)")."""
    value = value.rstrip(".")
    for opening, closing in ("()", "[]", "{}"):
        while value.endswith(closing) and value.count(opening) < value.count(closing):
            value = value[:-1]
    return value


def _looks_like_secret(value: str, connector: str) -> bool:
    if len(value) < 4 or _PLACEHOLDER.match(value):
        return False
    if connector == "=":
        return True
    if not connector:
        return len(value) >= 6 and bool(
            (re.search(r"\d", value) and re.search(r"[^\W\d_]", value))
            or re.search(r"[^\w\s]", value[:-1])
            or re.search(r"[A-Z]", value[1:])
        )
    if len(value) < 6 and not re.search(r"\d", value):
        return False
    return bool(re.search(r"[\d\W_]", value) or re.search(r"[A-Z]", value[1:]))
