"""django-filter filter sets for memproc's lists (applied to querysets already scoped to the caller)."""

from __future__ import annotations

import django_filters

from memproc import models


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
