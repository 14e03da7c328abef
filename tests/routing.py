"""`--db=routed`: memproc's tables in a database of their own, as a site with a router keeps them.

The default database holds everything else (users, sessions, the admin's log) and no memproc table,
so a query or a transaction that forgets the router fails ("no such table") instead of passing on
the wrong database.
"""

from __future__ import annotations

from typing import Any

MEMORY_DB = "memory"


class MemprocRouter:
    """The router the docs show (guides/scaling.md): memproc's app label to its database, the rest to
    the default one."""

    def db_for_read(self, model: type, **hints: Any) -> str:
        return MEMORY_DB if model._meta.app_label == "memproc" else "default"

    def db_for_write(self, model: type, **hints: Any) -> str:
        return MEMORY_DB if model._meta.app_label == "memproc" else "default"

    def allow_relation(self, obj1: Any, obj2: Any, **hints: Any) -> bool:
        return True  # memproc's links to users (memproc.models USER_LINK) cross databases

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool:
        return (db == MEMORY_DB) == (app_label == "memproc")
