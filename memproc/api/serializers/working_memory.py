"""Working memory: its value (Markdown text or a JSON object), as read and as updated."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from memproc import models
from memproc.api.serializers.fields import JSON_OBJECT_SCHEMA, validate_json_text

WORKING_MEMORY_SCHEMA = {
    "description": "Markdown text, or (schema mode) a JSON object.",
    "oneOf": [{"type": "string"}, JSON_OBJECT_SCHEMA],
}


@extend_schema_field(WORKING_MEMORY_SCHEMA)
class WorkingMemoryValueField(serializers.JSONField):
    def to_internal_value(self, data: Any) -> Any:
        data = super().to_internal_value(data)
        if not isinstance(data, (str, dict)):
            raise serializers.ValidationError("Expected Markdown text or a JSON object.")
        return validate_json_text(data)


class WorkingMemorySerializer(serializers.Serializer):
    scope = serializers.ChoiceField(choices=models.WorkingMemoryRevision.Scope.choices)
    key = serializers.CharField(help_text="The thread id or the resource id.")
    working_memory = WorkingMemoryValueField()
    version = serializers.IntegerField()
    mode = serializers.ChoiceField(choices=[("markdown", "Markdown"), ("schema", "JSON schema")])


class WorkingMemoryUpdateSerializer(serializers.Serializer):
    working_memory = WorkingMemoryValueField(
        help_text="Markdown mode: the whole new text. Schema mode: an object merged into the current one."
    )
    replace = serializers.BooleanField(
        required=False, default=False, help_text="Schema mode: replace instead of merging."
    )
