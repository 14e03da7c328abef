"""memproc: LLM agents with memory for Django.

The public names are imported lazily so that `import memproc` works before Django is set up
(settings modules, `INSTALLED_APPS`).
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
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
