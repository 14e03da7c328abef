"""How many memproc requests use the database at once in one ASGI process.

Under ASGI, Django runs each request's sync code in a thread of its own, and each thread opens its
own database connection: 150 turns started at once opened 150 connections before any of them
reached its model wait and gave its connection back, and PostgreSQL (`max_connections=100`) refused
the rest. memproc's views take one of ASYNC_THREADS permits for the part of a request that uses the
database; a turn gives its permit back with its connection before it waits for the model
(`memproc.api.turn_runner`), so the permits bound the connections, not the turns in flight. Others
wait for a permit instead of failing. Under WSGI the server's workers already bound both.
"""

from __future__ import annotations

import threading

from memproc.conf import settings

_lock = threading.Lock()
_permits: threading.BoundedSemaphore | None = None
_held = threading.local()


def _semaphore() -> threading.BoundedSemaphore:
    global _permits
    with _lock:
        if _permits is None:
            _permits = threading.BoundedSemaphore(max(1, int(settings.ASYNC_THREADS)))
        return _permits


def admission_acquire() -> None:
    """Takes a permit for this request's thread (once; a second call while held does nothing)."""
    if getattr(_held, "permit", None) is None:
        permits = _semaphore()
        permits.acquire()
        _held.permit = permits


def admission_release() -> None:
    """Gives this thread's permit back, if it holds one."""
    permits = getattr(_held, "permit", None)
    if permits is not None:
        _held.permit = None
        permits.release()
