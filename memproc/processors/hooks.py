"""Calling a processor's hook, sync or `async def`, from the sync code that runs hook chains."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from asgiref.sync import async_to_sync

__all__ = ["call_hook", "is_async_hook"]


def call_hook(hook: Callable[..., Any], *args: Any) -> Any:
    """Calls a sync or async hook from sync code."""
    if is_async_hook(hook):
        return async_to_sync(hook)(*args)
    result = hook(*args)
    if result is not None and not isinstance(result, list) and inspect.isawaitable(result):

        async def _await() -> Any:
            return await result

        return async_to_sync(_await)()
    return result


def is_async_hook(hook: Callable[..., Any]) -> bool:
    # Asked afresh on every call: about 1 µs, and a turn calls some ten hooks.
    return inspect.iscoroutinefunction(hook)
