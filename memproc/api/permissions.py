"""Who may see which resources: the RESOURCE_RESOLVER setting and DRF permissions built on it.

Staff reach other owners' resources only with the model permission the admin would require of them
for the same act (DESIGN §5); without it a staff user is scoped like anyone, to their own resource.
"""

from __future__ import annotations

from typing import Any

from django.utils.module_loading import import_string
from rest_framework.permissions import SAFE_METHODS, BasePermission

from memproc.conf import settings

ALL = None  # a resolver returns None to grant every resource (operators)

# Any one of these lets staff act on another owner's threads, messages, turns, working memory and
# attachments. As in the admin, `change` implies `view`; deleting also needs `delete`.
THREAD_READ = ("memproc.view_thread", "memproc.change_thread")
THREAD_WRITE = ("memproc.change_thread",)
THREAD_DELETE = ("memproc.delete_thread",)
# The review queue: reading it, and reviewing (the admin's review actions need `change`).
TRIPWIRE_READ = ("memproc.view_tripwirelog", "memproc.change_tripwirelog")
TRIPWIRE_REVIEW = ("memproc.change_tripwirelog",)


def user_resources(request: Any) -> list[str] | None:
    """The default resolver: a user owns the resource named by their pk; staff reach every resource
    when they hold the admin's permission for the request's method (`staff_reach_all`)."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return []
    if staff_reach_all(user, getattr(request, "method", "GET")):
        return ALL
    return [str(user.pk)]


def staff_reach_all(user: Any, method: str) -> bool:
    """Whether `user` may use `method` on every owner's threads: staff (the admin's door) holding
    `view_thread` (or `change_thread`) to read, `change_thread` to write, and also `delete_thread` to
    delete. Superusers hold every permission."""
    if not (user.is_active and user.is_staff):
        return False
    if method in SAFE_METHODS:
        return has_any_perm(user, THREAD_READ)
    allowed = has_any_perm(user, THREAD_WRITE)
    if method == "DELETE":
        allowed = allowed and has_any_perm(user, THREAD_DELETE)
    return allowed


def has_any_perm(user: Any, perms: tuple[str, ...]) -> bool:
    return any(user.has_perm(perm) for perm in perms)


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


class TripwireQueuePermission(BasePermission):
    """The review queue holds every owner's blocked input, so, as in the admin, only active staff with
    `view_tripwirelog` (or `change_tripwirelog`) read it and only `change_tripwirelog` reviews. Anyone
    else is refused outright (403, the admin's answer), never shown a list scoped to their own."""

    message = "Blocked turns need memproc.view_tripwirelog; reviewing needs memproc.change_tripwirelog."

    def has_permission(self, request: Any, view: Any) -> bool:
        user = getattr(request, "user", None)
        if user is None or not (user.is_authenticated and user.is_active and user.is_staff):
            return False
        return has_any_perm(user, TRIPWIRE_READ if request.method in SAFE_METHODS else TRIPWIRE_REVIEW)
