"""memproc: LLM agents with memory for Django.

The public names are imported lazily so that `import memproc` works before Django is set up
(settings modules, `INSTALLED_APPS`).
"""

from __future__ import annotations

from typing import Any


def _installed_version() -> str:
    """The version of the installed distribution, django-memproc (the import name is memproc)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("django-memproc")
    except PackageNotFoundError:  # imported from a checkout that is not installed (PYTHONPATH)
        return "0+unknown"


__version__ = _installed_version()
__all__ = ["Agent", "Memory", "Tool", "tool"]

_LAZY = {
    "Agent": "memproc.agents.agent",
    "Memory": "memproc.memory",
    "Tool": "memproc.tools",
    "tool": "memproc.tools",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'memproc' has no attribute {name!r}")
