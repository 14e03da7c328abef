"""Validation of guardrail options: every check raises ConfigurationError naming the option."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from memproc.exceptions import ConfigurationError

PHASES = ("input", "output")


def choice(owner: str, name: str, value: Any, choices: Iterable[str]) -> str:
    options = tuple(choices)
    if value not in options:
        raise ConfigurationError(
            f"{owner}({name}=...) must be one of {', '.join(repr(c) for c in options)}, not {value!r}"
        )
    return value


def positive_int(owner: str, name: str, value: Any, *, minimum: int = 1) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ConfigurationError(f"{owner}({name}=...) must be an int >= {minimum}, not {value!r}")
    return value


def unit_interval(owner: str, name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise ConfigurationError(f"{owner}({name}=...) must be a number between 0 and 1, not {value!r}")
    return float(value)


def boolean(owner: str, name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigurationError(f"{owner}({name}=...) must be True or False, not {value!r}")
    return value


def phases(
    owner: str, value: Any, *, allowed: tuple[str, ...] = PHASES, name: str = "phases"
) -> frozenset[str]:
    """Accepts one phase name or a non-empty collection of them."""
    items = (value,) if isinstance(value, str) else value
    if not isinstance(items, Iterable):
        raise ConfigurationError(f"{owner}({name}=...) must be a phase name or a list of them, not {value!r}")
    items = tuple(items)
    if not items or any(item not in allowed for item in items):
        raise ConfigurationError(
            f"{owner}({name}=...) must name one or more of {', '.join(repr(p) for p in allowed)}, "
            f"not {value!r}"
        )
    return frozenset(items)


def names(owner: str, name: str, value: Any, *, known: Iterable[str] | None = None) -> tuple[str, ...]:
    """A non-empty list of distinct non-empty strings (a lone string is refused: it is iterable)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise ConfigurationError(f"{owner}({name}=...) must be a list of names, not {value!r}")
    items = tuple(value)
    if not items or not all(isinstance(item, str) and item for item in items):
        raise ConfigurationError(f"{owner}({name}=...) must hold one or more non-empty names")
    if known is not None:
        allowed = tuple(known)
        unknown = [item for item in items if item not in allowed]
        if unknown:
            raise ConfigurationError(
                f"{owner}({name}=...) has unknown {'entries' if len(unknown) > 1 else 'entry'} "
                f"{', '.join(map(repr, unknown))}; known: {', '.join(allowed)}"
            )
    return tuple(dict.fromkeys(items))


def model(owner: str, value: Any) -> Any:
    """None, a "provider/model" string, or an object with generate(); resolved at use time."""
    if value is None or callable(getattr(value, "generate", None)):
        return value
    if isinstance(value, str):
        provider, sep, rest = value.partition("/")
        if provider and sep and rest.strip("/"):
            return value
    raise ConfigurationError(
        f"{owner}(model=...) must be a 'provider/model' string or a ChatModel (an object with "
        f"generate()), not {value!r}"
    )
