"""Plain-SQL writes for the per-turn hot path and for bulk loads.

The ORM compiles every query anew; on a small machine that costs more than SQLite or PostgreSQL spend
running a turn's few statements. These helpers keep the ORM's value conversion (each field's
`get_db_prep_save`) and skip only the compiler. On PostgreSQL with psycopg 3, large batches go through
COPY: a 500-row INSERT spends most of its time in the driver's placeholder parsing and the server's
parse of a ~1 MB statement. COPY goes through psycopg's own cursor, so `execute_wrapper` hooks (query
counters, tracing) do not see it.

A table with a vector column is copied in COPY's binary format, vectors in pgvector's own binary form
(packed by NumPy): formatting a 384-float vector as text costs ~100 µs in Python, and the server
parses it again, per row. The column types are read once per database session (a `LIMIT 0` select).
"""

from __future__ import annotations

import functools
import itertools
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, ParamSpec, TypeVar

import numpy as np
from django.apps import apps
from django.db import ProgrammingError, connections, models, router, transaction

from memproc.fields import VectorField

P = ParamSpec("P")
R = TypeVar("R")

# From this many rows a PostgreSQL insert goes through COPY (below it, one INSERT is cheaper).
COPY_MIN_ROWS = 64


def memproc_db() -> str:
    """The database holding memproc's tables, as the site's router says (the default one without a
    router). A turn's writes span several tables in one transaction, and `on_commit` work must wait
    for that database's commit: every transaction and callback names it. `manage.py check` refuses a
    router that splits memproc's tables between databases (memproc.E016)."""
    return router.db_for_write(apps.get_model("memproc", "Message"))


_sqlite_writer = threading.RLock()


@contextmanager
def one_sqlite_writer(using: str = "default") -> Iterator[None]:
    """On SQLite, this process's writers take turns on a Python lock before they begin.

    SQLite has one writer at a time, and a writer that finds the database locked sleeps in its busy
    handler in steps of up to 100 ms before it tries again, however soon the lock is free. Concurrent
    turns of one process (ASGI, threads) so waited tens of milliseconds for a save that takes one;
    on a Python lock the next writer wakes as the previous one commits. Other processes still meet
    SQLite's own lock. Elsewhere, and inside a caller's transaction (which may already hold SQLite's
    lock: waiting here could stall it), nothing is taken.
    """
    connection = connections[using]
    if connection.vendor != "sqlite" or connection.in_atomic_block:
        yield
        return
    with _sqlite_writer:
        yield


def memproc_atomic(function: Callable[P, R]) -> Callable[P, R]:
    """`@transaction.atomic` on memproc's database, named when the function runs (the site's router
    is read then). A bare `@transaction.atomic` is the default database's transaction: under a
    router that keeps memproc's tables elsewhere, each write would commit on its own and `on_commit`
    work (a file's removal) run at once, before the writes after it."""

    @functools.wraps(function)
    def in_transaction(*args: P.args, **kwargs: P.kwargs) -> R:
        with transaction.atomic(using=memproc_db()):
            return function(*args, **kwargs)

    return in_transaction


@contextmanager
def atomic_write(using: str = "default") -> Iterator[None]:
    """`transaction.atomic(using)` under `one_sqlite_writer(using)`, whose lock is handed on at
    commit, before the `on_commit` callbacks run: those send to a broker or run inline jobs (an
    embedder call), and the next writer must not wait for them."""
    connection = connections[using]
    if connection.vendor != "sqlite" or connection.in_atomic_block:
        with transaction.atomic(using=using):
            yield
        return
    held = _sqlite_writer.acquire()

    def hand_on() -> None:
        nonlocal held
        if held:
            held = False
            _sqlite_writer.release()

    try:
        with transaction.atomic(using=using):
            transaction.on_commit(hand_on, using=using)  # the first callback of this transaction
            yield
    finally:
        hand_on()


def _columns(model: type[models.Model], names: tuple[str, ...]) -> tuple[str, tuple[models.Field, ...]]:
    fields = tuple(model._meta.get_field(name) for name in names)
    return model._meta.db_table, fields


def model_fields(model: type[models.Model], names: Iterable[str]) -> tuple[models.Field, ...]:
    """The fields of `model` named `names`, in that order."""
    return _columns(model, tuple(names))[1]


def _target(
    connection: Any, model: type[models.Model], names: tuple[str, ...]
) -> tuple[str, str, tuple[models.Field, ...]]:
    """(quoted table, quoted column list, fields) of an insert into `model`'s `names` (15 µs for a
    message row, beside its insert)."""
    table, fields = _columns(model, names)
    quote = connection.ops.quote_name
    return quote(table), ", ".join(quote(f.column) for f in fields), fields


def _values_sql(rows: int, row: str) -> str:
    """`VALUES row, row, ...`: `rows` copies of one row's placeholders."""
    return "VALUES " + ", ".join([row] * rows)


def _marks(width: int) -> str:
    return "(" + ", ".join(["%s"] * width) + ")"


# Fewer parameters than any supported database's cap on one statement (SQLite before 3.32: 999).
_ALWAYS_BINDABLE = 999


def _stores_text_as_is(field: models.Field) -> bool:
    """Whether the field saves a `str` unchanged (Char/Text fields and keys to them), so the per-turn
    insert can skip its `get_db_prep_save` for str values, which only re-checks that they are str."""
    if isinstance(field, models.ForeignKey):
        return _stores_text_as_is(field.target_field)
    return type(field) in (models.CharField, models.TextField)


def insert_rows(
    model: type[models.Model],
    rows: Sequence[Mapping[str, Any]],
    *,
    fields: Iterable[str],
    using: str = "default",
    ignore_conflicts: bool = False,
) -> int:
    """Inserts `rows` (dicts keyed by field name) into `model`'s table, in as few statements as the
    database allows; with `ignore_conflicts`, rows that clash with a unique constraint are skipped.
    Returns how many rows were inserted."""
    if not rows:
        return 0
    connection = connections[using]
    quoted, columns, model_fields = _target(connection, model, tuple(fields))
    if connection.vendor == "postgresql" and len(rows) >= COPY_MIN_ROWS and _can_copy(connection):
        vectors = [i for i, f in enumerate(model_fields) if isinstance(f, VectorField)]
        binary = bool(vectors)
        copied = [[_copy_value(f, row[f.name], connection, binary) for f in model_fields] for row in rows]
        try:
            return _copy(connection, quoted, columns, copied, ignore_conflicts, vectors=vectors)
        except _NoTemporaryTables:
            connection.memproc_no_temporary_tables = True  # this role may not: INSERT from now on
    values = prepared_values(model_fields, rows, connection)
    return _insert_batches(connection, quoted, columns, model_fields, values, ignore_conflicts)


def _insert_batches(
    connection: Any,
    quoted: str,
    columns: str,
    model_fields: Sequence[models.Field],
    values: Sequence[Sequence[Any]],
    ignore_conflicts: bool,
) -> int:
    # SQLite caps bound parameters per statement (32,766 since 3.32, 999 before).
    per_statement = (
        len(values)
        if len(values) * len(model_fields) <= _ALWAYS_BINDABLE
        else connection.ops.bulk_batch_size(list(model_fields), values) or len(values)
    )
    return sum(
        _insert(connection, quoted, columns, values[start : start + per_statement], ignore_conflicts)
        for start in range(0, len(values), per_statement)
    )


def prepared_values(
    model_fields: Sequence[models.Field], rows: Sequence[Mapping[str, Any]], connection: Any
) -> list[list[Any]]:
    """Each row's values as the database takes them (each field's `get_db_prep_save`)."""
    text = [_stores_text_as_is(f) for f in model_fields]
    return [
        [
            value if kept and type(value) is str else field.get_db_prep_save(value, connection)
            for field, kept in zip(model_fields, text, strict=True)
            for value in (row[field.name],)
        ]
        for row in rows
    ]


def _insert(
    connection: Any, table: str, columns: str, values: Sequence[Sequence[Any]], ignore_conflicts: bool
) -> int:
    verb, suffix = "INSERT", ""
    if ignore_conflicts:
        if connection.vendor == "sqlite":
            verb = "INSERT OR IGNORE"
        else:
            suffix = " ON CONFLICT DO NOTHING"
    sql = f"{verb} INTO {table} ({columns}) {_values_sql(len(values), _marks(len(values[0])))}{suffix}"
    with connection.cursor() as cursor:
        cursor.execute(sql, list(itertools.chain.from_iterable(values)))
        return cursor.rowcount


class _NoTemporaryTables(Exception):
    """The role lacks the TEMPORARY privilege that a COPY skipping conflicts needs."""


def _can_copy(connection: Any) -> bool:
    """psycopg 3's `Cursor.copy` (psycopg2 has only `copy_expert`, which needs CSV quoting by hand)."""
    from django.db.backends.postgresql.psycopg_any import is_psycopg3

    return is_psycopg3 and not getattr(connection, "memproc_no_temporary_tables", False)


def _copy_value(field: models.Field, value: Any, connection: Any, binary: bool) -> Any:
    if binary and isinstance(field, VectorField) and value is not None:
        array = np.asarray(value, dtype=np.float32)
        if array.ndim != 1:
            raise ValueError("a vector must be one-dimensional")
        # pgvector's vector_recv: int16 dimensions, int16 unused, float4s, all big-endian.
        header = np.array([array.size, 0], dtype=">u2").tobytes()
        return header + array.astype(">f4").tobytes()
    return field.get_db_prep_save(value, connection)


def _vector_dumper(oid: int) -> type:
    """A dumper class for one COPY (a few microseconds, beside a COPY of 64 rows or more)."""
    from psycopg.adapt import Dumper
    from psycopg.pq import Format

    class PackedVectorDumper(Dumper):
        format = Format.BINARY

        def dump(self, obj: Any) -> bytes:
            return bytes(obj)

    PackedVectorDumper.oid = oid
    return PackedVectorDumper


def _binary_types(
    connection: Any, cursor: Any, table: str, columns: str, vectors: Sequence[int]
) -> list[int]:
    """The columns' type oids, with the packed-vector dumper registered for the vector columns' type
    on this cursor. Asked each time: one round trip per COPY of 64 rows or more."""
    cursor.execute(f"SELECT {columns} FROM {table} LIMIT 0")
    oids = [column.type_code for column in cursor.description]
    for index in vectors:  # on the cursor: it took a copy of the connection's adapters
        cursor.cursor.adapters.register_dumper(None, _vector_dumper(oids[index]))
    return oids


def _copy(
    connection: Any,
    table: str,
    columns: str,
    values: Sequence[Sequence[Any]],
    ignore_conflicts: bool,
    *,
    vectors: Sequence[int] = (),
) -> int:
    """COPY straight into the table, or, to skip conflicting rows (COPY cannot), into a temporary
    table dropped at commit and then `INSERT ... SELECT ... ON CONFLICT DO NOTHING`. Returns how many
    rows were inserted."""
    with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
        binary = bool(vectors)
        types = _binary_types(connection, cursor, table, columns, vectors) if binary else None
        target = table
        if ignore_conflicts:
            target = connection.ops.quote_name("memproc_copy_" + table.strip('"'))
            try:
                cursor.execute(
                    f"CREATE TEMPORARY TABLE {target} ON COMMIT DROP "
                    f"AS SELECT {columns} FROM {table} WITH NO DATA"
                )
            except ProgrammingError as exc:  # permission denied: the savepoint rolls back, nothing lost
                raise _NoTemporaryTables from exc
        # The raw cursor's COPY: errors are wrapped by hand into Django's (IntegrityError, ...).
        with (
            connection.wrap_database_errors,
            cursor.cursor.copy(
                f"COPY {target} ({columns}) FROM STDIN" + (" (FORMAT BINARY)" if binary else "")
            ) as copy,
        ):
            if types is not None:
                copy.set_types(types)
            for row in values:
                copy.write_row(row)
        if not ignore_conflicts:
            return len(values)
        cursor.execute(
            f"INSERT INTO {table} ({columns}) SELECT {columns} FROM {target} ON CONFLICT DO NOTHING"
        )
        inserted: int = cursor.rowcount
        cursor.execute(f"DROP TABLE {target}")
        return inserted
