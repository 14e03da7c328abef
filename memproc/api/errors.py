"""One place that maps memproc's errors to HTTP responses: 400, 404, 409, 413, 502, 503, never a 500
for bad input. memproc's views use this handler; the project's `EXCEPTION_HANDLER` is left alone.

A failing model provider (502), embedder or attachment storage (503) is answered with the error's
`public_message`, what failed in memproc's words: the provider's own message, its status and its URL
(or the storage's endpoint and bucket) are in the exception's text for the server log only (DESIGN
§5: no error body carries a secret, a provider's own message or an internal URL). A configuration
error (500) is answered just as generically. Django's refusals of a request body (too large, too many
fields or files, unreadable) are answered as JSON too, not as Django's HTML pages.
"""

from __future__ import annotations

import logging
from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent, TooManyFilesSent
from django.db import InterfaceError, OperationalError
from django.http import Http404, UnreadablePostError
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler
from rest_framework.views import set_rollback

from memproc import exceptions as memproc_exceptions
from memproc.services.working_memory import WorkingMemoryConflict

logger = logging.getLogger(__name__)

NOT_FOUND = "Not found."
DATABASE_UNAVAILABLE = "The database is unavailable; try again in a moment."
MISCONFIGURED = "memproc is not configured correctly on this server; its log says why."
ATTACHMENT_TOO_LARGE_CODES = frozenset({"too_large"})
BODY_TOO_LARGE = (
    "The request body is too large. Send files as file parts of a multipart form or as data URIs in "
    "JSON; other form fields are limited by the site's DATA_UPLOAD_MAX_MEMORY_SIZE."
)


def error_body(detail: str, code: str) -> dict[str, str]:
    """The shape of every error that is not a field error: `{"detail", "code"}`."""
    return {"detail": detail, "code": code}


def memproc_status(exc: BaseException) -> tuple[int, dict[str, Any]]:
    """The status and body for one of memproc's errors, or a lookup of something unknown."""
    if isinstance(exc, memproc_exceptions.ThreadOwnershipError):
        # Another owner's thread answers exactly as a missing one would.
        return status.HTTP_404_NOT_FOUND, error_body(NOT_FOUND, "not_found")
    if isinstance(exc, memproc_exceptions.ModelError):
        logger.info("memproc: answered 502 for a model provider error (%s): %s", exc.code, exc)
        return status.HTTP_502_BAD_GATEWAY, error_body(exc.public_message, exc.code)
    if isinstance(exc, memproc_exceptions.StorageUnavailable):
        logger.warning("memproc: answered 503 for an attachment storage error: %s", exc)
        return status.HTTP_503_SERVICE_UNAVAILABLE, error_body(exc.public_message, exc.code)
    if isinstance(exc, memproc_exceptions.RequestTooLarge):
        return status.HTTP_413_REQUEST_ENTITY_TOO_LARGE, error_body(str(exc), exc.code)
    if isinstance(exc, memproc_exceptions.AttachmentError):
        code = getattr(exc, "code", "attachment_error")
        if code in ATTACHMENT_TOO_LARGE_CODES:
            return status.HTTP_413_REQUEST_ENTITY_TOO_LARGE, error_body(str(exc), code)
        return status.HTTP_400_BAD_REQUEST, {"messages": [str(exc)]}  # a refused file in a turn's input
    if isinstance(exc, memproc_exceptions.MessageConflict):
        # A client message id already in use (another thread's, or a concurrent request's).
        return status.HTTP_409_CONFLICT, {"messages": [str(exc)]}
    if isinstance(exc, memproc_exceptions.ValidationError):
        return status.HTTP_400_BAD_REQUEST, {"non_field_errors": [str(exc)]}
    if isinstance(exc, memproc_exceptions.PendingCallConflict):
        return status.HTTP_409_CONFLICT, error_body(str(exc), exc.code)
    if isinstance(exc, WorkingMemoryConflict):
        return status.HTTP_409_CONFLICT, error_body(str(exc), exc.code)
    if isinstance(exc, memproc_exceptions.EmbedderUnavailable):
        logger.warning("memproc: answered 503 for an embedder error: %s", exc)
        return status.HTTP_503_SERVICE_UNAVAILABLE, error_body(exc.public_message, exc.code)
    if isinstance(exc, memproc_exceptions.ConfigurationError):
        # Its text may name settings, URLs, or quote a provider's refusal (a bad key): the log only.
        # A 503, not a 500: the server is up and the request was fine, but a back end it needs (a
        # model without a key, say) is not set up; the operator's fix makes the same request work.
        logger.error("memproc: configuration error while serving a request: %s", exc)
        return status.HTTP_503_SERVICE_UNAVAILABLE, error_body(MISCONFIGURED, exc.code)
    if isinstance(exc, LookupError):
        return status.HTTP_404_NOT_FOUND, error_body(str(exc) or NOT_FOUND, "not_found")
    code = getattr(exc, "code", "memproc_error")
    return status.HTTP_400_BAD_REQUEST, error_body(str(exc), code)


def memproc_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF exception handler for memproc's views; `{"detail", "code"}` for everything but field errors."""
    if isinstance(exc, memproc_exceptions.MemprocError) or is_unknown_lookup(exc):
        status_code, body = memproc_status(exc)
        set_rollback()
        return Response(body, status=status_code)
    if isinstance(exc, (OperationalError, InterfaceError)):
        # The database refused or dropped the connection (too many clients, a restart): a back end
        # that is down, so a 503 the client may retry, never an HTML 500.
        logger.warning("memproc: answered 503 for a database error: %s", exc)
        set_rollback()
        response = Response(error_body(DATABASE_UNAVAILABLE, "database_unavailable"), status=503)
        response["Retry-After"] = "1"
        return response
    if isinstance(exc, RecursionError):  # JSON nested deeper than Python parses or walks
        return Response(error_body("The request body is nested too deeply.", "parse_error"), status=400)
    refused = request_body_refusal(exc)
    if refused is not None:
        return refused
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()  # the same answer for a missing object and another owner's
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(response.data, dict) and set(response.data) == {"detail"}:
        response.data["code"] = _api_exception_code(exc)
    return response


def request_body_refusal(exc: Exception) -> Response | None:
    """Django's own refusals of a request body, raised while it is read (Django would answer them with
    an HTML 400): a body over DATA_UPLOAD_MAX_MEMORY_SIZE (read by code other than memproc's
    parsers, or a multipart form's non-file fields) is a 413, like memproc's own limit."""
    if isinstance(exc, RequestDataTooBig):
        return Response(error_body(BODY_TOO_LARGE, "too_large"), status=413)
    if isinstance(exc, (TooManyFieldsSent, TooManyFilesSent)):
        return Response(error_body(str(exc), "too_many_fields"), status=400)
    if isinstance(exc, UnreadablePostError):
        return Response(error_body("The request body could not be read.", "parse_error"), status=400)
    return None


def is_unknown_lookup(exc: BaseException) -> bool:
    """A `LookupError` raised for an unknown id (an agent, a thread); KeyError and IndexError are bugs."""
    return isinstance(exc, LookupError) and not isinstance(exc, (KeyError, IndexError))


def _api_exception_code(exc: Exception) -> str:
    if isinstance(exc, exceptions.APIException):
        codes = exc.get_codes()
        return codes if isinstance(codes, str) else exc.default_code
    if isinstance(exc, Http404):
        return "not_found"
    if isinstance(exc, DjangoPermissionDenied):
        return "permission_denied"
    return "error"
