"""django-filter filter sets for memproc's lists (applied to querysets already scoped to the caller)."""

from __future__ import annotations

import django_filters
from django import forms

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


class ThreadFilter(django_filters.FilterSet):
    resource_id = django_filters.CharFilter(
        field_name="resource_id", help_text="Only this resource's threads."
    )
    agent = django_filters.CharFilter(
        field_name="agent_id", help_text="Only threads started with this agent."
    )

    class Meta:
        model = models.Thread
        fields = ["resource_id", "agent"]


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
