"""Cursor pagination for memproc's lists; a tampered cursor is a 404, never a database error."""

from __future__ import annotations

from typing import Any

from django.utils.dateparse import parse_datetime
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.pagination import Cursor, CursorPagination
from rest_framework.request import Request


class MemprocCursorPagination(CursorPagination):
    """`?cursor=` and `?limit=`; the position is checked before it reaches a query."""

    page_size = 50
    page_size_query_param = "limit"
    max_page_size = 200

    def decode_cursor(self, request: Request) -> Cursor | None:
        cursor = super().decode_cursor(request)
        if cursor is not None and cursor.position is not None and not self.position_is_valid(cursor.position):
            raise NotFound(self.invalid_cursor_message)
        return cursor

    def position_is_valid(self, position: str) -> bool:
        return parse_datetime(position) is not None if _is_text(position) else False


class MessageCursorPagination(MemprocCursorPagination):
    """A thread's messages by `sequence`, oldest first; `?order=desc` for newest first."""

    ordering = "sequence"
    order_query_param = "order"

    def get_ordering(self, request: Request, queryset: Any, view: Any) -> tuple[str, ...]:
        order = request.query_params.get(self.order_query_param, "asc")
        if order not in ("asc", "desc"):
            raise ValidationError({self.order_query_param: ['Must be "asc" or "desc".']})
        return ("-sequence",) if order == "desc" else ("sequence",)

    def position_is_valid(self, position: str) -> bool:
        try:
            int(position)
        except (TypeError, ValueError):
            return False
        return True


class ThreadCursorPagination(MemprocCursorPagination):
    """Threads, most recently active first."""

    ordering = ("-updated_at", "id")


class TripwireCursorPagination(MemprocCursorPagination):
    """Tripwire logs, newest first."""

    ordering = ("-created_at", "id")


def _is_text(value: Any) -> bool:
    return isinstance(value, str) and "\x00" not in value
