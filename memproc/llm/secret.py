"""`Secret`: a credential that never prints.

Django's DEBUG error page lists every frame's local variables, loggers format arguments, and
tracebacks show reprs: a key kept as a plain `str` ends up in all of them. A `Secret` shows as
`Secret('********')` wherever it is printed, and gives its value only to `reveal()`, which is called
where the value leaves for the wire (the SDK client's constructor) and nowhere else.
"""

from __future__ import annotations

import hmac
from typing import Any, NoReturn

__all__ = ["MASK", "Secret"]

MASK = "********"
# Shorter values are not masked inside texts (`redact`): "k" would blank every k of a message.
MIN_REDACT_LENGTH = 6


class Secret:
    """An immutable credential whose `repr`, `str` and `format` are masked; `reveal()` gives it."""

    __slots__ = ("_value",)

    def __init__(self, value: str | Secret) -> None:
        if isinstance(value, Secret):
            value = value.reveal()
        if not isinstance(value, str):
            raise TypeError(f"a Secret holds a string, not {type(value).__name__}")
        object.__setattr__(self, "_value", value)

    def reveal(self) -> str:
        """The value itself: only for handing it to the client that sends it."""
        return self._value

    def redact(self, text: str) -> str:
        """`text` with every occurrence of the value masked (a provider's error may quote the key)."""
        if len(self._value) < MIN_REDACT_LENGTH or not isinstance(text, str):
            return text
        return text.replace(self._value, MASK)

    def __repr__(self) -> str:
        return f"Secret({MASK!r})"

    def __str__(self) -> str:
        return MASK

    def __format__(self, spec: str) -> str:
        return format(MASK, spec)

    def __bool__(self) -> bool:
        return bool(self._value)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Secret):
            return NotImplemented
        return hmac.compare_digest(self._value.encode(), other._value.encode())

    def __hash__(self) -> int:
        return hash((Secret, self._value))

    def __setattr__(self, name: str, value: Any) -> NoReturn:
        raise AttributeError("a Secret is immutable")

    def __copy__(self) -> Secret:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Secret:
        return self

    def __reduce__(self) -> NoReturn:
        raise TypeError("a Secret cannot be pickled: the pickle would carry the value in clear")
