"""Calling a processor's hook, sync or `async def`, from the sync code that runs hook chains."""

from __future__ import annotations

import inspect
import weakref
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


# Whether a hook's function is a coroutine function, by function: inspect's check unwraps and reads
# flags on every call, and every hook call of every turn asks.
_ASYNC_HOOKS: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()


def is_async_hook(hook: Callable[..., Any]) -> bool:
    function = getattr(hook, "__func__", None)
    if function is None:  # not a bound method: a partial, a callable object, ...; not cached
        return inspect.iscoroutinefunction(hook)
    known = _ASYNC_HOOKS.get(function)
    if known is None:
        known = _ASYNC_HOOKS[function] = inspect.iscoroutinefunction(hook)
    return known
