"""Template tags of memproc's admin templates."""

from __future__ import annotations

from typing import Any

from django import template

register = template.Library()


@register.inclusion_tag("admin/memproc/includes/operator_counts.html", takes_context=True)
def memproc_operator_counts(context: template.Context) -> dict[str, Any]:
    """Threads created today and tripwires awaiting review, for the user allowed to see them."""
    from memproc.admin.dashboard import operator_counts

    user = getattr(context.get("request"), "user", None)
    if user is None or not user.has_module_perms("memproc"):
        return {"counts": None}
    return {
        "counts": operator_counts(),
        "can_view_tripwires": user.has_perm("memproc.view_tripwirelog")
        or user.has_perm("memproc.change_tripwirelog"),
    }
