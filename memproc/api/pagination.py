"""Cursor pagination for memproc's lists. A cursor is the client's to forge, so it is checked before it
reaches a query: a tampered one (not base64, an impossible date, a number out of range) answers 400
`{"cursor": [...]}`, never a database error. `?limit=` is a whole number of at least 1 (more than
`max_page_size` gets `max_page_size`); anything else answers 400 `{"limit": [...]}` rather than being
ignored, as the OpenAPI schema says."""

from __future__ import annotations

from datetime import UTC
from typing import Any

from django.utils.dateparse import parse_datetime
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.pagination import Cursor, CursorPagination
from rest_framework.request import Request

from memproc.selectors.threads import THREAD_ORDERINGS

BIGINT_MIN, BIGINT_MAX = -(2**63), 2**63 - 1
LIMIT_ERROR = "A whole number of at least 1."


def limit_schema() -> dict[str, Any]:
    """The OpenAPI schema of `?limit=`: what `get_page_size` accepts."""
    return {"type": "integer", "minimum": 1}


class MemprocCursorPagination(CursorPagination):
    """`?cursor=` and `?limit=`, positioned by a timestamp; the position is normalized (an aware UTC
    time, as the server writes it) or refused before it reaches a query."""

    page_size = 50
    page_size_query_param = "limit"
    max_page_size = 200
    cursor_query_description = "The `next` or `previous` link's cursor; any other value is a 400."

    def get_page_size(self, request: Request) -> int:
        raw = request.query_params.get(self.page_size_query_param)
        if raw is None:
            return self.page_size
        if not (raw.isascii() and raw.isdigit()) or int(raw) < 1:
            raise ValidationError({self.page_size_query_param: [LIMIT_ERROR]})
        return min(int(raw), self.max_page_size)

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            if parameter["name"] == self.page_size_query_param:
                parameter["schema"] = limit_schema()
                parameter["description"] = (
                    f"Items per page (default {self.page_size}, at most {self.max_page_size})."
                )
        return parameters

    def decode_cursor(self, request: Request) -> Cursor | None:
        try:
            cursor = super().decode_cursor(request)
        except NotFound as exc:  # DRF's answer to a cursor that is not base64 or not its format
            raise self.invalid_cursor() from exc
        if cursor is None or cursor.position is None:
            return cursor
        position = self.clean_position(cursor.position) if _is_text(cursor.position) else None
        if position is None:
            raise self.invalid_cursor()
        return cursor._replace(position=position)

    def clean_position(self, position: str) -> str | None:
        """The position as the server writes it, or None if it cannot be one."""
        try:
            value = parse_datetime(position)  # raises ValueError for e.g. month 13 or a +99:00 offset
            if value is None:
                return None
            if value.tzinfo is None:
                value = value.replace(tzinfo=UTC)
            return str(value.astimezone(UTC))  # OverflowError past year 1 or 9999 in UTC
        except (ValueError, OverflowError):
            return None

    def invalid_cursor(self) -> ValidationError:
        return ValidationError({self.cursor_query_param: [str(self.invalid_cursor_message)]})


class MessageCursorPagination(MemprocCursorPagination):
    """A thread's messages by `sequence`, oldest first; `?order=desc` for newest first."""

    ordering = "sequence"
    order_query_param = "order"

    def get_ordering(self, request: Request, queryset: Any, view: Any) -> tuple[str, ...]:
        order = request.query_params.get(self.order_query_param, "asc")
        if order not in ("asc", "desc"):
            raise ValidationError({self.order_query_param: ['Must be "asc" or "desc".']})
        return ("-sequence",) if order == "desc" else ("sequence",)

    def clean_position(self, position: str) -> str | None:
        """A sequence number, within the range of the column (a 64-bit integer)."""
        try:
            value = int(position)
        except ValueError:
            return None
        return str(value) if BIGINT_MIN <= value <= BIGINT_MAX else None


class ThreadCursorPagination(MemprocCursorPagination):
    """Threads, most recently active first unless `?ordering=` names another of THREAD_ORDERINGS
    (anything else is a 400); ties broken by the id, so pages are stable."""

    ordering = ("-updated_at", "id")

    def get_ordering(self, request: Request, queryset: Any, view: Any) -> tuple[str, ...]:
        ordering = request.query_params.get("ordering", self.ordering[0])
        if ordering not in THREAD_ORDERINGS:
            raise ValidationError({"ordering": [f"Must be one of: {', '.join(THREAD_ORDERINGS)}."]})
        return (ordering, "id")


class TripwireCursorPagination(MemprocCursorPagination):
    """Tripwire logs, newest first."""

    ordering = ("-created_at", "id")


def _is_text(value: Any) -> bool:
    return isinstance(value, str) and "\x00" not in value


class PendingCursorPagination(MemprocCursorPagination):
    """The queue of waiting tool calls, oldest first (the first to expire)."""

    ordering = ("created_at", "id")
