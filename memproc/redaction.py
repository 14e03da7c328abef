"""What may leave the process about a failure: texts masked before a span, a log line or a row has them.

A provider's error can quote the API key, the request's text and a URL with credentials in it; any
exception's text can, when a custom model or embedder raises one of its own. memproc masks the errors
it raises where it raises them (`scrub`, with the key and the request's text at hand), and renders
every exception it puts on a span, in a log record or in a stored row through `describe` and
`traceback_text`, which mask key-like tokens again and leave out the original, chained exception:

- secrets: the values given, key-like tokens (`sk-...`), `Bearer ...`, `api_key=...` and the like,
  and credentials in URLs (`https://user:password@host`) become `********`;
- content: any run of `MIN_QUOTE` characters or more that the request's text also holds becomes
  `[content]`, unless `MEMPROC["TRACE_CONTENT"]` is on;
- an exception memproc did not raise itself (one raised in a provider's SDK, a database driver or a
  custom model) keeps only its class and its stack frames, unless `TRACE_CONTENT` is on: its text is
  someone else's, which memproc cannot vouch for (Postgres, like some providers, quotes the data).
"""

from __future__ import annotations

import json
import os
import re
import traceback
from collections.abc import Iterable, Iterator
from typing import Any

from memproc.conf import settings

__all__ = ["CONTENT_MASK", "MASK", "describe", "message", "scrub", "traceback_text"]

MASK = "********"
CONTENT_MASK = "[content]"
# The shortest run of characters shared with the request's text that counts as a quote of it.
MIN_QUOTE = 8
# Known secrets shorter than this are not masked: "k" would blank every k of a message.
MIN_SECRET = 6
# memproc's own source files: an exception raised there has a text memproc wrote.
_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep
_CAUSE = "The above exception was the direct cause of the following exception:"
_CONTEXT = "During handling of the above exception, another exception occurred:"
# The most of one exception's text that is ever rendered (and scanned for quotes).
MAX_TEXT = 2000

_SECRET_PATTERNS = (
    # OpenAI-style keys: sk-..., sk-proj-..., and their cousins
    (re.compile(r"\b(sk|pk|rk)-[A-Za-z0-9_\-]{6,}"), rf"\1-{MASK}"),
    (re.compile(r"(?i)\b(bearer|basic|token)(\s+)[A-Za-z0-9._~+/=\-]{6,}"), rf"\1\2{MASK}"),
    # api_key=..., "password": "...", x-api-key: ..., ?sig=...&token=...
    (
        re.compile(
            r"(?i)\b(api[_-]?key|apikey|access[_-]?token|refresh[_-]?token|auth[_-]?token|token|secret"
            r"|client[_-]?secret|password|passwd|pwd|sig|signature|credentials?)"
            r"([\"']?\s*[=:]\s*[\"']?)[^\s\"'&,;)}\]]+"
        ),
        rf"\1\2{MASK}",
    ),
    # credentials in a URL: scheme://user:password@host
    (re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^/\s@]+@"), rf"\1{MASK}@"),
)


def scrub(text: str, *, secrets: Iterable[Any] = (), content: Iterable[str] = ()) -> str:
    """`text` with `secrets` (str or `Secret`), key-like tokens and URL credentials masked, and, unless
    TRACE_CONTENT is on, every quote of `content` (the request's texts) left out."""
    text = str(text)[:MAX_TEXT]
    for secret in secrets:
        value = secret.reveal() if hasattr(secret, "reveal") else secret
        if isinstance(value, str) and len(value) >= MIN_SECRET:
            text = text.replace(value, MASK)
    for pattern, replacement in _SECRET_PATTERNS:
        text = pattern.sub(replacement, text)
    if not settings.TRACE_CONTENT:
        text = _without_quotes(text, content)
    return text


def _without_quotes(text: str, content: Iterable[str]) -> str:
    """`text` with every run of MIN_QUOTE characters or more found in `content` (as it is, or escaped
    for JSON, as providers quote it) replaced by CONTENT_MASK."""
    # Paid only when something failed: about 0.2 s for a 2,000-character text against 200 KB of
    # request text, 10 ms against 10 KB (measured); provider texts are usually shorter still.
    texts = [t for t in content if isinstance(t, str) and t.strip()]
    if not texts:
        return text
    escaped = [json.dumps(t, ensure_ascii=False)[1:-1] for t in texts]
    haystack = "\x00".join([*texts, *(e for e, t in zip(escaped, texts, strict=True) if e != t)])
    kept, start, i = [], 0, 0
    while i <= len(text) - MIN_QUOTE:
        if text[i : i + MIN_QUOTE] not in haystack:
            i += 1
            continue
        end = i + MIN_QUOTE
        while end < len(text) and text[i : end + 1] in haystack:
            end += 1
        kept += [text[start:i], CONTENT_MASK]
        start = i = end
    kept.append(text[start:])
    return "".join(kept)


def message(exc: BaseException) -> str:
    """The text of `exc` that may be shown, masked: that of an exception memproc raised (a memproc
    error, or one raised by memproc's own code), another's only with TRACE_CONTENT, else nothing."""
    if not settings.TRACE_CONTENT and not _raised_by_memproc(exc):
        return ""
    return scrub(str(exc))


def _raised_by_memproc(exc: BaseException) -> bool:
    """Whether memproc wrote the text of `exc`: a memproc error (masked where it is raised), or an
    exception raised by a line of memproc's code, not by a provider's SDK, a driver or user code."""
    from memproc.exceptions import MemprocError

    if isinstance(exc, MemprocError):
        return True
    tb = exc.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    return os.path.abspath(tb.tb_frame.f_code.co_filename).startswith(_PACKAGE)


def describe(exc: BaseException) -> str:
    """`Class: masked text` (or the class alone), for a log line or a stored row."""
    text = message(exc)
    name = type(exc).__name__
    if text:
        return f"{name}: {text}"
    return name if _raised_by_memproc(exc) else f"{name} (its text is shown with TRACE_CONTENT)"


def traceback_text(exc: BaseException) -> str:
    """A traceback of `exc` as Python prints one, each exception of the chain rendered by `describe`:
    the frames (file, line, function, source line), no exception's own text unless `message` allows."""
    blocks = []
    for current, relation in reversed(list(_chain(exc))):  # the oldest first, as Python prints them
        frames = traceback.format_tb(current.__traceback__)
        if frames:
            blocks.append("Traceback (most recent call last):\n" + "".join(frames))
        module = type(current).__module__
        prefix = "" if module == "builtins" else f"{module}."
        blocks.append(f"{prefix}{describe(current)}\n")
        if relation:
            blocks.append(f"\n{relation}\n\n")
    return "".join(blocks).rstrip("\n")


def _chain(exc: BaseException) -> Iterator[tuple[BaseException, str]]:
    """`exc`, then what it was raised from or during, each once, as a traceback follows them; with
    each, how it led to the one before it."""
    seen: set[int] = set()
    current: BaseException | None = exc
    relation = ""
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        cause = current.__cause__
        context = None if current.__suppress_context__ else current.__context__
        yield current, relation
        current = cause or context
        relation = _CAUSE if cause is not None else _CONTEXT
