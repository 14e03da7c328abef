"""How many memproc requests use the database at once in one ASGI process.

Under ASGI, Django runs each request's sync code in a thread of its own, and each thread opens its
own database connection: 150 turns started at once opened 150 connections before any of them
reached its model wait and gave its connection back, and PostgreSQL (`max_connections=100`) refused
the rest. memproc's views take one of ASYNC_THREADS permits for the part of a request that uses the
database; a turn gives its permit back with its connection before it waits for the model
(`memproc.turns.asgi`), so the permits bound the connections, not the turns in flight. Others
wait for a permit instead of failing. Under WSGI the server's workers already bound both.

The permits are per process: N worker processes (`uvicorn --workers N`) admit N × ASYNC_THREADS
requests and hold up to about N × 2 × ASYNC_THREADS connections. Nothing here is shared between
processes; Django's connection pool, per process too, bounds the connections under it
(docs/guides/deploying.md, "Several worker processes").

A request gives its permit back the same way while it waits on another network back end that may be
slow or silent, the attachment storage (`admission_paused`): an upload stuck on S3 until botocore's
timeouts end it must not keep other users' reads waiting for a permit.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connections

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


@contextmanager
def admission_paused() -> Iterator[None]:
    """Around a wait on the network: a thread that holds a permit closes its database connections and
    gives the permit back, and takes one again after (waiting for it like a new request). Inside a
    transaction the connection cannot be closed, so the permit is kept: the wait is then bounded only
    by the back end's own timeouts."""
    if getattr(_held, "permit", None) is None or any(
        c.in_atomic_block for c in connections.all(initialized_only=True)
    ):
        yield
        return
    for connection in connections.all(initialized_only=True):
        connection.close()
    admission_release()
    try:
        yield
    finally:
        admission_acquire()
