"""Plain-SQL writes for the per-turn hot path.

The ORM compiles every query anew; on a small machine that costs more than SQLite or PostgreSQL spend
running a turn's few statements. These helpers keep the ORM's value conversion (each field's
`get_db_prep_save`) and skip only the compiler.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from typing import Any

from django.db import connections, models


@cache
def _columns(model: type[models.Model], names: tuple[str, ...]) -> tuple[str, tuple[models.Field, ...]]:
    fields = tuple(model._meta.get_field(name) for name in names)
    return model._meta.db_table, fields


def insert_rows(
    model: type[models.Model],
    rows: Sequence[Mapping[str, Any]],
    *,
    fields: Iterable[str],
    using: str = "default",
    ignore_conflicts: bool = False,
) -> None:
    """One multi-row INSERT of `rows` (dicts keyed by field name) into `model`'s table."""
    if not rows:
        return
    names = tuple(fields)
    table, model_fields = _columns(model, names)
    connection = connections[using]
    quote = connection.ops.quote_name
    columns = ", ".join(quote(f.column) for f in model_fields)
    placeholders = "(" + ", ".join(["%s"] * len(names)) + ")"
    params: list[Any] = []
    for row in rows:
        params.extend(f.get_db_prep_save(row[f.name], connection) for f in model_fields)
    verb = "INSERT"
    suffix = ""
    if ignore_conflicts:
        if connection.vendor == "sqlite":
            verb = "INSERT OR IGNORE"
        else:
            suffix = " ON CONFLICT DO NOTHING"
    sql = f"{verb} INTO {quote(table)} ({columns}) VALUES " + ", ".join([placeholders] * len(rows)) + suffix
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
