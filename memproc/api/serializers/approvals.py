"""Tool calls that wait for a decision: how they are shown, and the decisions' bodies."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from memproc import models
from memproc.api.serializers.fields import JSONObjectField, StringField, validate_json_text


class PendingCallSerializer(serializers.Serializer):
    """`pending` of a suspended turn's result: the call it waits on."""

    id = serializers.CharField(help_text="The PendingToolCall's id: decide it at pending/<id>/.")
    tool_name = serializers.CharField()
    tool_call_id = serializers.CharField()
    args = JSONObjectField()
    kind = serializers.ChoiceField(choices=["approval", "client"])
    expires_at = serializers.DateTimeField(allow_null=True)


class PendingToolCallSerializer(serializers.ModelSerializer):
    arguments = JSONObjectField(read_only=True)
    edited_arguments = serializers.JSONField(read_only=True, allow_null=True)
    result = serializers.JSONField(read_only=True, allow_null=True)
    decided_by = serializers.SerializerMethodField()
    text = serializers.SerializerMethodField(help_text="What the model wrote before the call.")

    class Meta:
        model = models.PendingToolCall
        fields = [
            "id",
            "agent_id",
            "thread_id",
            "resource_id",
            "tool_name",
            "tool_call_id",
            "arguments",
            "kind",
            "state",
            "text",
            "created_at",
            "expires_at",
            "decided_by",
            "decided_at",
            "reason",
            "edited_arguments",
            "result",
        ]
        read_only_fields = fields

    @extend_schema_field({"type": "string", "nullable": True})
    def get_decided_by(self, pending: models.PendingToolCall) -> str | None:
        return pending.decided_by.get_username() if pending.decided_by_id and pending.decided_by else None

    @extend_schema_field({"type": "string"})
    def get_text(self, pending: models.PendingToolCall) -> str:
        for message in reversed(pending.turn.get("responses", [])):
            texts = [
                p.get("text", "") for p in message["content"].get("parts", []) if p.get("type") == "text"
            ]
            if message["role"] == "assistant" and any(texts):
                return "".join(texts)
        return ""


class ApproveSerializer(serializers.Serializer):
    arguments = JSONObjectField(
        required=False,
        allow_null=True,
        help_text="Arguments to run instead of the model's, checked against the tool's schema.",
    )


class RejectSerializer(serializers.Serializer):
    reason = StringField(
        required=False, allow_blank=True, max_length=2000, default="", help_text="Told to the model."
    )


class ToolResultSerializer(serializers.Serializer):
    result = serializers.JSONField(help_text="The client-side tool's result, as the model will read it.")

    def validate_result(self, value: Any) -> Any:
        return validate_json_text(value)
