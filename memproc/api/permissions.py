"""Who may see which resources: the RESOURCE_RESOLVER setting and DRF permissions built on it."""

from __future__ import annotations

from typing import Any

from django.utils.module_loading import import_string
from rest_framework.permissions import BasePermission

from memproc.conf import settings

ALL = None  # a resolver returns None to grant every resource (operators)


def user_resources(request: Any) -> list[str] | None:
    """The default resolver: staff see every resource; a user owns the resource named by their pk."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return []
    if user.is_staff:
        return ALL
    return [str(user.pk)]


def resolve_resources(request: Any) -> list[str] | None:
    """The resource ids `request` may use (None: all), through the RESOURCE_RESOLVER setting."""
    resolver = settings.RESOURCE_RESOLVER
    if isinstance(resolver, str):
        resolver = import_string(resolver)
    resources = resolver(request)
    return None if resources is None else [str(r) for r in resources]


def may_use_resource(request: Any, resource_id: str) -> bool:
    allowed = resolve_resources(request)
    return allowed is None or resource_id in allowed


def default_resource(request: Any) -> str | None:
    """The resource a request acts for when it names none: its only one, or the user's pk for staff."""
    allowed = resolve_resources(request)
    if allowed is None:
        user = getattr(request, "user", None)
        return str(user.pk) if user is not None and user.is_authenticated else None
    return allowed[0] if len(allowed) == 1 else None


class HasResources(BasePermission):
    """Authenticated callers that the resolver grants at least one resource."""

    message = "Authentication credentials were not provided or grant no resource."

    def has_permission(self, request: Any, view: Any) -> bool:
        allowed = resolve_resources(request)
        return allowed is None or bool(allowed)
