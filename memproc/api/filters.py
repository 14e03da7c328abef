"""django-filter filter sets for memproc's lists (applied to querysets already scoped to the caller)."""

from __future__ import annotations

from typing import Any

import django_filters
from django import forms
from django.db.models import QuerySet

from memproc import models


class NoEmptyValuesForm(forms.Form):
    """A filter whose schema is an enum or a date-time, sent empty (`?status=`), is a 400 like any
    other value outside the schema, not "no filter". Text filters (`?agent=`) may be empty."""

    def clean(self) -> dict[str, object]:
        cleaned = super().clean() or {}
        for name, field in self.fields.items():
            if isinstance(field, (forms.ChoiceField, forms.DateTimeField)) and self.data.get(name) == "":
                self.add_error(name, "Give a value, or leave the parameter out.")
        return cleaned


ARCHIVED_CHOICES = [
    ("false", "Threads that are not archived (the default)"),
    ("true", "Archived threads only"),
    ("all", "Every thread"),
]


class ThreadFilter(django_filters.FilterSet):
    """Narrows the thread list. Without `archived`, archived threads are left out: the list is what a
    chat UI shows, and an archived conversation is one its user put away."""

    archived = django_filters.ChoiceFilter(
        choices=ARCHIVED_CHOICES,
        method="filter_archived",
        empty_label=None,
        help_text="`false` (default): threads that are not archived; `true`: archived ones; `all`: both.",
    )
    resource_id = django_filters.CharFilter(
        field_name="resource_id", help_text="Only this resource's threads."
    )
    agent = django_filters.CharFilter(
        field_name="agent_id", help_text="Only threads started with this agent."
    )

    class Meta:
        model = models.Thread
        form = NoEmptyValuesForm
        fields = ["archived", "resource_id", "agent"]

    def __init__(self, data: Any = None, *args: Any, **kwargs: Any) -> None:
        if data is not None and "archived" not in data:
            data = data.copy()
            data["archived"] = "false"
        super().__init__(data, *args, **kwargs)

    def filter_archived(self, queryset: QuerySet[Any], name: str, value: str) -> QuerySet[Any]:
        if value == "all":
            return queryset
        return queryset.filter(archived_at__isnull=value == "false")


class TripwireFilter(django_filters.FilterSet):
    status = django_filters.ChoiceFilter(choices=models.TripwireLog.Status.choices)
    agent = django_filters.CharFilter(field_name="agent_id", help_text="The agent id.")
    processor = django_filters.CharFilter(field_name="processor_id", help_text="The processor id.")
    phase = django_filters.ChoiceFilter(choices=models.TripwireLog.Phase.choices)
    resource_id = django_filters.CharFilter(field_name="resource_id")
    thread_id = django_filters.CharFilter(field_name="thread_id")
    created_after = django_filters.IsoDateTimeFilter(field_name="created_at", lookup_expr="gte")
    created_before = django_filters.IsoDateTimeFilter(field_name="created_at", lookup_expr="lt")

    class Meta:
        model = models.TripwireLog
        form = NoEmptyValuesForm
        fields = [
            "status",
            "agent",
            "processor",
            "phase",
            "resource_id",
            "thread_id",
            "created_after",
            "created_before",
        ]
