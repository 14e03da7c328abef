"""What every validator of the MEMPROC setting shares: messages with ids and hints, and small tests."""

from __future__ import annotations

import difflib
import importlib.util
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from django.core.checks import CheckMessage, Error, Warning

# A validator receives a key of MEMPROC and its value (the default when the key is not set).
Validator = Callable[[str, Any], list[CheckMessage]]
# A relation checks keys that depend on each other. It receives the values (defaults filled in) that
# passed their own validators, and says nothing when one of its keys is missing from them.
Relation = Callable[[Mapping[str, Any]], list[CheckMessage]]

OBJ = "MEMPROC"
DISTRIBUTION = "django-memproc"  # the name pip installs memproc by (pyproject.toml)
REPR_CHARS = 80


def error(key: str | tuple[Any, ...], text: str, *, hint: str, id: str) -> Error:
    """An error about MEMPROC[key] (a tuple of keys for a nested value); `id` is like "E007"."""
    return Error(f"{setting_name(key)} {text}", hint=hint, obj=OBJ, id=f"memproc.{id}")


def warning(key: str | tuple[Any, ...], text: str, *, hint: str, id: str) -> Warning:
    return Warning(f"{setting_name(key)} {text}", hint=hint, obj=OBJ, id=f"memproc.{id}")


def setting_name(key: str | tuple[Any, ...]) -> str:
    """MEMPROC['MODELS']['openai'] for ("MODELS", "openai")."""
    path = key if isinstance(key, tuple) else (key,)
    return OBJ + "".join(f"[{part!r}]" for part in path)


def show(value: Any) -> str:
    """A short repr for a message (a long list or dict is cut)."""
    text = repr(value)
    return text if len(text) <= REPR_CHARS else text[: REPR_CHARS - 3] + "..."


def installed(module: str) -> bool:
    """Whether `module` can be imported, found without importing it."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def pip_install(extra: str) -> str:
    return f'pip install "{DISTRIBUTION}[{extra}]"'


def did_you_mean(name: Any, known: Iterable[str]) -> str:
    """A sentence naming the known name closest to `name`, or "" when none is close."""
    if not isinstance(name, str):
        return ""
    matches = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    if not matches:
        upper = {k.upper(): k for k in known}
        matches = [upper[name.upper()]] if name.upper() in upper else []
    return f" Did you mean {matches[0]!r}?" if matches else ""


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
