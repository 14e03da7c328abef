"""The pgvector store's search statement.

A search is ONE round trip: `SET LOCAL hnsw.ef_search`, `SET LOCAL hnsw.iterative_scan` (pgvector 0.8+)
and a SELECT, sent together as one simple-protocol string. In autocommit the three run as one implicit
transaction, so the settings last for that search only; inside a caller's transaction they last until
its end (harmless: they only tune HNSW scans). No session SET, so poolers in transaction mode are fine.

The SELECT picks its own strategy, with no extra round trip: it counts the scope's rows up to
`EXACT_SEARCH_MAX_ROWS` (an index-only scan), looks the embedder's HNSW index up in `pg_index`, and,
through two branches gated on both, either scores every row of the scope exactly (small scopes, and
any scope while the embedder has no *valid* index: none yet, one being built CONCURRENTLY, or an
interrupted build's leftover) or orders by the HNSW index expression with iterative scanning, so a
filter on one resource or thread still yields `top_k` rows when the scope is a small fraction of the
table. In that branch the planner may still prefer the (model, resource_id) btree and a sort for a
selective scope; that answer is exact. The HNSW branch is joined by an exact scan of the scope's
tail (through the partial btree `memproc_emb_tail`), and the two candidate lists are merged by
distance. The count is an index-only scan of up to `exact_max_rows + 1` entries on every search:
remembering which scopes were large saved 0.1–0.2 ms of a 4.3 ms search at 20,000 rows
(2026-12-04), less than it cost to keep right, so nothing is remembered.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from memproc.fields import vector_literal
from memproc.models import MessageEmbedding
from memproc.vectors.base import SearchFilter, scope_sql
from memproc.vectors.pgvector_index import columns, index_name, index_type, pgvector_version

# Rows fetched from the HNSW branch per wanted message: room for several chunks of one message.
CHUNK_OVERFETCH = 4


def search_statement(
    connection: Any,
    *,
    ef_search: int,
    exact_max_rows: int,
    embedder_id: str,
    query: np.ndarray,
    top_k: int,
    thread_id: str | None = None,
    resource_id: str | None = None,
    threshold: float | None = None,
    filter: SearchFilter | None = None,
) -> str:
    """The search's SQL (one string, values inlined: see `PgvectorStore.search_sql`)."""
    # No parallel workers: the exact branch's top-N sort got a Gather Merge whose two idle workers
    # cost ~9 ms to launch on every search, even when the HNSW branch answered.
    prefix = f"SET LOCAL max_parallel_workers_per_gather = 0; SET LOCAL hnsw.ef_search = {int(ef_search)}; "
    if pgvector_version(connection) >= (0, 8):
        prefix += "SET LOCAL hnsw.iterative_scan = relaxed_order; "
    scope, scope_params = scope_clause(connection, embedder_id, thread_id, resource_id)
    if filter:
        admitted, admitted_params = admitted_sql(connection, filter, thread_id, resource_id)
        scope = f"{scope} AND {columns(connection)['message']} IN ({admitted})"
        scope_params = [*scope_params, *admitted_params]
    select, params = select_sql(
        connection,
        scope,
        scope_params,
        literal=vector_literal(query),
        dims=int(query.size),
        top_k=top_k,
        exact_max_rows=exact_max_rows,
        index=index_name(embedder_id, int(query.size), index_type(connection)),
    )
    if threshold is not None:
        select += " HAVING MIN(distance) <= %s"
        params.append(1.0 - float(threshold))
    select += f" ORDER BY distance, message_id LIMIT {int(top_k)}"
    return prefix + connection.ops.compose_sql(select, params)


def scope_clause(
    connection: Any, embedder_id: str, thread_id: str | None, resource_id: str | None
) -> tuple[str, list[Any]]:
    return scope_sql(columns(connection), embedder_id, thread_id, resource_id)


def admitted_sql(
    connection: Any, filter: SearchFilter, thread_id: str | None, resource_id: str | None
) -> tuple[str, list[Any]]:
    """The SELECT of the message ids a filter admits in the scope, with its parameters."""
    admitted = filter.messages(thread_id=thread_id, resource_id=resource_id).values("id")
    sql, params = admitted.query.get_compiler(connection=connection).as_sql()
    return sql, list(params)


def select_sql(
    connection: Any,
    scope: str,
    scope_params: list[Any],
    *,
    literal: str,
    dims: int,
    top_k: int,
    exact_max_rows: int,
    index: str,
) -> tuple[str, list[Any]]:
    """Counts the scope (capped at `exact_max_rows + 1`), then runs the exact branch or the HNSW
    and tail branches.

    Each branch is gated on the count and on `index` being valid (`pg_index.indisvalid`: no index,
    one being built CONCURRENTLY and an interrupted build's leftover are all invalid, and the planner
    uses none of them) by one-time filters, so the other branch is never executed. Without the
    validity gate a large scope with no index would be ordered by the index expression (halfvec by
    default) with a sort: nearly, not strictly, exact, and slower than the exact branch. The exact
    branch measures distance on the untyped column, which no index matches: it scores every row of
    the scope (through the btree on model and thread or resource) and keeps the best few with a top-N
    heap sort before grouping chunks by message. The HNSW branch orders by the
    index expression, over-fetching so that several chunks of one message still leave `top_k`
    messages; the tail branch scores the scope's unmarked rows (not yet in the graph) exactly, through
    the partial btree on them, and GROUP BY with the caller's ORDER BY merges the two lists by
    distance. The threshold is a HAVING on the best chunk: a WHERE on the distance could be pushed
    into the exact branch and evaluated on rows of another size before the dimensions test. The
    search returns the count as a fourth column.
    """
    column = columns(connection)
    table = connection.ops.quote_name(MessageEmbedding._meta.db_table)
    same_size = f"{column['dimensions']} = {dims}"
    # The HNSW branch orders by the index's expression (in its type) and returns the full-precision
    # distance, so that a halfvec index merges with the exact branches on equal terms.
    kind = index_type(connection)
    index_order = f"({column['vector']}::{kind}({dims})) <=> %s::{kind}({dims})"
    distance = f"({column['vector']}::vector({dims})) <=> %s::vector({dims})"
    limit = top_k * CHUNK_OVERFETCH
    # to_regclass: NULL (so not valid) when the index does not exist; names resolve like the table's.
    valid = (
        "(SELECT COALESCE(bool_or(indisvalid), false) FROM pg_catalog.pg_index "
        f"WHERE indexrelid = to_regclass('{index}'))"
    )
    scope_rows = "(SELECT n FROM scope_rows)"
    use_index = f"({scope_rows} > {exact_max_rows} AND {valid})"
    count = f", {scope_rows} AS scope_rows"
    exact = (
        f"scope_rows AS (SELECT COUNT(*) AS n FROM "
        f"(SELECT 1 FROM {table} WHERE {scope} LIMIT {exact_max_rows + 1}) AS capped), "
    )
    params: list[Any] = [*scope_params]
    sql = (
        f"WITH {exact}candidates AS ("
        f"(SELECT {column['message']} AS message_id, {column['thread_id']} AS thread_id, "
        f"({column['vector']} <=> %s::vector) AS distance FROM {table} "
        f"WHERE {scope} AND {same_size} AND NOT {use_index} "
        f"ORDER BY 3 LIMIT {limit}) UNION ALL "
    )
    params += [literal, *scope_params]
    sql += (
        f"(SELECT {column['message']} AS message_id, {column['thread_id']} AS thread_id, "
        f"{distance} AS distance FROM {table} "
        f"WHERE {scope} AND {same_size} AND {column['indexed']} AND {use_index} "
        f"ORDER BY {index_order} LIMIT {limit}) "
        f"UNION ALL "
        f"(SELECT {column['message']}, {column['thread_id']}, {distance} FROM {table} "
        f"WHERE {scope} AND {same_size} AND NOT {column['indexed']} AND {use_index} "
        f"ORDER BY 3 LIMIT {limit})) "
        f"SELECT message_id, thread_id, MIN(distance) AS distance{count} FROM candidates "
        f"GROUP BY message_id, thread_id"
    )
    params += [literal, *scope_params, literal]  # the HNSW branch (select list, scope, order)
    params += [literal, *scope_params]  # the tail branch
    return sql, params


def last_result(cursor: Any, connection: Any) -> list[tuple[Any, ...]]:
    """Rows of the last statement of a multi-statement execute (psycopg 3 starts at the first)."""
    rows = cursor.fetchall() if cursor.description else []
    while True:
        try:
            more = cursor.nextset()
        except connection.Database.NotSupportedError:  # psycopg2 already sits on the last result
            return rows
        if not more:
            return rows
        if cursor.description:
            rows = cursor.fetchall()
