"""Tripwires: the one that blocked a turn, the stored logs, and their review."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from memproc import models
from memproc.api.serializers.fields import JSONObjectField


class TripwireSerializer(serializers.Serializer):
    reason = serializers.CharField()
    processor_id = serializers.CharField()
    phase = serializers.ChoiceField(choices=models.TripwireLog.Phase.choices)
    retry = serializers.BooleanField()
    metadata = JSONObjectField()


class TripwireLogSerializer(serializers.ModelSerializer):
    metadata = JSONObjectField(read_only=True)
    content = serializers.JSONField(
        read_only=True, allow_null=True, help_text="The blocked messages, if stored."
    )
    reviewed_by = serializers.SerializerMethodField()

    class Meta:
        model = models.TripwireLog
        fields = [
            "id",
            "agent_id",
            "processor_id",
            "phase",
            "reason",
            "retry",
            "metadata",
            "thread_id",
            "resource_id",
            "content",
            "status",
            "reviewed_by",
            "reviewed_at",
            "note",
            "created_at",
        ]
        read_only_fields = fields

    @extend_schema_field({"type": "string", "nullable": True})
    def get_reviewed_by(self, log: models.TripwireLog) -> str | None:
        return log.reviewed_by.get_username() if log.reviewed_by_id else None


class TripwireReviewSerializer(serializers.Serializer):
    status = serializers.ChoiceField(choices=models.TripwireLog.Status.choices)
    note = serializers.CharField(required=False, allow_blank=True, default="", max_length=10_000)
