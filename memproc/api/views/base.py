"""What every memproc view shares: permissions, throttles, JSON input, the error handler, and the
resource checks that turn another owner's object into a 404."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from django.conf import settings
from django.db import transaction
from django.utils.decorators import method_decorator
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework import serializers
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.settings import api_settings

from memproc import models
from memproc.admission import admission_acquire, admission_release
from memproc.api.errors import memproc_exception_handler
from memproc.api.parsers import MemprocJSONParser
from memproc.api.permissions import HasResources, default_resource, resolve_resources
from memproc.api.protocols.auth import authenticator_classes
from memproc.api.serializers.errors import ErrorSerializer
from memproc.api.throttling import MemprocUserThrottle
from memproc.exceptions import ValidationError as MemprocValidationError
from memproc.selectors.threads import thread_get, thread_named
from memproc.turns.asgi import is_asgi

ERROR_DESCRIPTIONS = {
    400: "Invalid input: `{field: [message]}` field errors.",
    401: "Not authenticated.",
    403: "Not allowed.",
    404: "Not found (or owned by another resource).",
    409: "A conflict: a concurrent change, or a message id already in use.",
    413: "The body or an attachment is too large.",
    422: "The Idempotency-Key was used with another body.",
    429: "Throttled.",
    502: "The model provider failed.",
    503: "A back end (file storage, embedder) is unavailable; try again later.",
}
FIELD_ERRORS = {"type": "object", "additionalProperties": True, "description": ERROR_DESCRIPTIONS[400]}


V = TypeVar("V", bound=type)


def outside_request_transactions(view: V) -> V:
    """Exempts a view that runs turns from ATOMIC_REQUESTS on every database, memproc's included
    wherever the router puts it (a bare `non_atomic_requests` exempts the default one only).

    A turn owns its commits: inside a request-wide transaction its locks (SQLite's one writer, the
    thread's row) would be held through the tool and model calls, its after-commit work would wait
    for the response, and a blocked turn's tripwire log would go with a request that fails."""
    for alias in settings.DATABASES:
        view = method_decorator(transaction.non_atomic_requests(using=alias), name="dispatch")(view)
    return view


def errors(*codes: int) -> dict[int, OpenApiResponse]:
    """OpenAPI responses for error statuses: field errors for 400, `{"detail", "code"}` otherwise."""
    responses = {401: _error(401), 403: _error(403), 429: _error(429)}
    for code in codes:
        responses[code] = (
            OpenApiResponse(FIELD_ERRORS, description=ERROR_DESCRIPTIONS[400])
            if code == 400
            else _error(code)
        )
    return dict(sorted(responses.items()))


def _error(code: int) -> OpenApiResponse:
    return OpenApiResponse(ErrorSerializer, description=ERROR_DESCRIPTIONS[code])


def id_parameter(description: str) -> OpenApiParameter:
    return OpenApiParameter("id", str, OpenApiParameter.PATH, description=description)


THREAD_RESOURCE_PARAMETER = OpenApiParameter(
    "resource_id",
    str,
    OpenApiParameter.QUERY,
    required=False,
    description="The thread's resource. A thread id names a thread within its resource; callers who "
    "reach several resources (staff) name one when more than one has a thread of this id.",
)


class MemprocViewMixin:
    """memproc's policies, set on its own views so the project's REST_FRAMEWORK is never edited:
    authentication follows the project (plus DRF tokens as `Bearer`, as on the protocol endpoints);
    permission, throttling, parsing and errors are memproc's."""

    permission_classes: list[type] = [HasResources]
    throttle_classes: list[type] = [MemprocUserThrottle]
    parser_classes = [MemprocJSONParser]
    lookup_field = "pk"
    lookup_url_kwarg = "id"
    lookup_value_regex = "[^/]+"

    def get_authenticators(self) -> list[Any]:
        return [cls() for cls in authenticator_classes()]

    def get_throttles(self) -> list[Any]:
        """The project's default throttles, then memproc's own."""
        classes = [*api_settings.DEFAULT_THROTTLE_CLASSES]
        classes += [c for c in self.throttle_classes if c not in classes]
        return [cls() for cls in classes]

    def get_exception_handler(self) -> Callable[..., Any]:
        return memproc_exception_handler

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        if is_asgi(request):
            admission_acquire()  # before authentication: its query is the request's first
        super().initial(request, *args, **kwargs)  # type: ignore[misc]

    def dispatch(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().dispatch(request, *args, **kwargs)  # type: ignore[misc]
        finally:
            admission_release()  # whatever happened, even an exception no handler answered

    def allowed_resources(self) -> list[str] | None:
        """Resource ids the caller may use; None means all (staff with the model permission the
        request's method needs). Resolved once per request."""
        request: Request = self.request  # type: ignore[attr-defined]
        if not hasattr(request, "_memproc_resources"):
            request._memproc_resources = resolve_resources(request)
        return request._memproc_resources

    def may_use(self, resource_id: str) -> bool:
        allowed = self.allowed_resources()
        return allowed is None or resource_id in allowed

    def require_resource(self, resource_id: str) -> str:
        """`resource_id` if the caller may use it; anything else is a 404, never a 403."""
        if not path_id_ok(resource_id) or not self.may_use(resource_id):
            raise NotFound()
        return resource_id

    def settle_owner(self, thread_id: str | None, resource_id: str | None) -> tuple[str, Any]:
        """The resource a turn is for, and its thread if it exists. A thread id names a thread within
        its resource (DESIGN §5): the given resource's thread, else the caller's one thread of that id,
        else a new thread of the caller's default resource. A resource the caller may not use is a 404;
        another resource's thread of the same id is never seen."""
        request: Request = self.request  # type: ignore[attr-defined]
        if resource_id is not None:
            self.require_resource(resource_id)
            return resource_id, thread_get(
                thread_id=thread_id, resource_id=resource_id
            ) if thread_id else None
        thread = self.find_thread(thread_id) if thread_id else None
        if thread is not None:
            return thread.resource_id, thread
        resource_id = default_resource(request)
        if resource_id is None:
            raise serializers.ValidationError({"resource_id": ["Name the resource this turn is for."]})
        return resource_id, None

    def find_thread(self, thread_id: str, resource_id: str | None = None) -> models.Thread | None:
        """The caller's thread `thread_id`: in `resource_id` (404 if the caller may not use it), else in
        the caller's own resource. Staff who reach every resource act on another owner's thread only
        by naming its `resource_id` (an id alone never lands on someone else's thread of that id); a
        caller whom the resolver grants several resources names one when more than one has a thread
        of that id (400)."""
        if resource_id is not None:
            self.require_resource(resource_id)
            return thread_get(thread_id=thread_id, resource_id=resource_id)
        allowed = self.allowed_resources()
        if allowed is None:
            own = default_resource(self.request)  # type: ignore[attr-defined]
            return thread_get(thread_id=thread_id, resource_id=own) if own else None
        if len(allowed) == 1:
            return thread_get(thread_id=thread_id, resource_id=allowed[0])
        try:
            return thread_named(thread_id=thread_id, resource_ids=allowed)
        except MemprocValidationError as exc:
            raise serializers.ValidationError(
                {"resource_id": ["Several resources have a thread with this id; name the resource_id."]}
            ) from exc

    def thread_object(self) -> models.Thread:
        """The thread a `threads/<id>/...` URL names (`?resource_id=` picks the resource), else 404."""
        request: Request = self.request  # type: ignore[attr-defined]
        thread_id = self.kwargs.get(self.lookup_url_kwarg, "")  # type: ignore[attr-defined]
        resource_id = request.query_params.get("resource_id")
        if not path_id_ok(thread_id) or (resource_id is not None and not path_id_ok(resource_id)):
            raise NotFound()
        thread = self.find_thread(thread_id, resource_id)
        if thread is None:
            raise NotFound()
        self.check_object_permissions(request, thread)  # type: ignore[attr-defined]
        return thread

    def get_object(self) -> Any:
        if not path_id_ok(self.kwargs.get(self.lookup_url_kwarg, "")):  # type: ignore[attr-defined]
            raise NotFound()
        return super().get_object()  # type: ignore[misc]


def path_id_ok(value: str) -> bool:
    """An id from a URL that can reach a query (PostgreSQL refuses NUL characters)."""
    return bool(value) and "\x00" not in value and len(value) <= 255
