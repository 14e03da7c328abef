"""PIIDetector's options: the channels (and the older `phases=`), the redaction template, custom
patterns. Every check raises ConfigurationError naming the option."""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Any

from memproc.exceptions import ConfigurationError
from memproc.guardrails import _channels, _options, _pii_patterns

PHASES = ("input", "output")
CHANNELS = ("input", "history", "recall", "working_memory", "tool_result", "output", "stream")
DEFAULT_CHANNELS = ("input", "tool_result", "output", "stream")
_PHASE_CHANNELS = {"input": ("input",), "output": ("output", "stream")}
WITHHELD_NOTE = "[Remembered content withheld: it holds personal data.]"
TOOL_NOTE = "[Tool result withheld: it holds personal data ({found}).]"


def channels(owner: str, channels: Any, phases: Any) -> frozenset[str]:
    if channels is not None and phases is not None:
        raise ConfigurationError(f"{owner}: give channels=... or the older phases=..., not both")
    if phases is not None:
        chosen = _options.phases(owner, phases, allowed=PHASES)
        return frozenset(c for p in chosen for c in _PHASE_CHANNELS[p])
    return _channels.parse(owner, DEFAULT_CHANNELS if channels is None else channels, supported=CHANNELS)


def redaction(redaction: Any) -> str:
    if not isinstance(redaction, str):
        raise ConfigurationError(f"PIIDetector(redaction=...) must be a string, not {redaction!r}")
    if redaction in ("mask", "hash"):
        return redaction
    try:
        redaction.format(type="email")
    except (KeyError, IndexError, ValueError) as exc:
        raise ConfigurationError(
            f"PIIDetector(redaction=...) {redaction!r} is not a valid template: only {{type}} may be "
            "used (double other braces)"
        ) from exc
    return redaction


def custom_detectors(patterns: Any, *, known: Collection[str]) -> dict[str, Any]:
    """PIIDetector(patterns=...): a detector per new type name; ConfigurationError for anything else."""
    if patterns is not None and not isinstance(patterns, Mapping):
        raise ConfigurationError(
            f"PIIDetector(patterns=...) must map type names to regexes, not {patterns!r}"
        )
    detectors = {}
    for name, pattern in (patterns or {}).items():
        if not isinstance(name, str) or not name or name in known:
            raise ConfigurationError(
                f"PIIDetector(patterns=...) needs new type names, not {name!r} (built-in types are "
                "chosen with types=...)"
            )
        detectors[name] = _pii_patterns.custom_detector(compiled(name, pattern))
    return detectors


def compiled(name: str, pattern: Any) -> re.Pattern[str]:
    if isinstance(pattern, re.Pattern):
        return pattern
    if not isinstance(pattern, str) or not pattern:
        raise ConfigurationError(
            f"PIIDetector(patterns=...) {name!r} needs a regular expression, not {pattern!r}"
        )
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ConfigurationError(f"PIIDetector(patterns=...) {name!r} is not a valid regex: {exc}") from exc


def phases_of(chosen: frozenset[str]) -> frozenset[str]:
    """The older `phases` view of the channels: "input", and "output" for output or stream."""
    return frozenset(p for p in PHASES if set(_PHASE_CHANNELS[p]) & chosen)
