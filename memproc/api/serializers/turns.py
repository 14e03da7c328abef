"""Turns: the generate requests (JSON and multipart), their results, and the stored turn records."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from memproc import models
from memproc.api.serializers.approvals import PendingCallSerializer
from memproc.api.serializers.fields import IdField, JSONObjectField
from memproc.api.serializers.messages import (
    MESSAGE_TEXT_SCHEMA,
    MessageSerializer,
    MessagesField,
    message_errors,
    thread_open_calls,
)
from memproc.api.serializers.tripwires import TripwireSerializer
from memproc.messages import to_messages


class GenerateRequestSerializer(serializers.Serializer):
    messages = MessagesField()
    thread_id = IdField(required=False, allow_null=True, help_text="Continue (or start) this thread.")
    resource_id = IdField(
        required=False, allow_null=True, help_text="The owner; defaults to the caller's resource."
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        """Tool results before the request's first assistant message answer the thread's last
        message; without such a call they would reach the model as orphans."""
        messages = to_messages(attrs["messages"])
        first = next((i for i, m in enumerate(messages) if m.role == "assistant"), len(messages))
        if any(m.tool_results for m in messages[:first]):
            # The view passes its thread lookup: a thread id names a thread within its resource.
            find = self.context.get("find_thread")
            thread_id = attrs.get("thread_id")
            thread = find(thread_id, attrs.get("resource_id")) if find and thread_id else None
            errors = message_errors(messages, thread_calls=thread_open_calls(thread.pk if thread else None))
            if errors:
                raise serializers.ValidationError({"messages": errors})
        return attrs


@extend_schema_field({"type": "string", "format": "binary"})
class UploadField(serializers.FileField):
    """A file part of a multipart form (drf-spectacular describes a FileField as a URI, which is how it
    is rendered, not how it is sent)."""


@extend_schema_field(
    {**MESSAGE_TEXT_SCHEMA, "description": "The messages as JSON, or the text of one user message."}
)
class MessagesTextField(serializers.CharField):
    """`messages` as a form field: JSON, or one user message's text (see MESSAGE_TEXT_SCHEMA)."""


class GenerateUploadSerializer(serializers.Serializer):
    """The multipart form of a generate/stream request: the fields, plus files for the last user message."""

    messages = MessagesTextField()
    thread_id = IdField(required=False, help_text="Continue (or start) this thread.")
    resource_id = IdField(required=False, help_text="The owner; defaults to the caller's resource.")
    files = serializers.ListField(child=UploadField(), required=False, help_text="Files to attach.")


class GenerateResultSerializer(serializers.Serializer):
    text = serializers.CharField(help_text='The final assistant text ("" when blocked).')
    messages = MessageSerializer(many=True, help_text="The turn's new messages, as saved.")
    tripwire = TripwireSerializer(allow_null=True)
    thread_id = serializers.CharField(allow_null=True)
    resource_id = serializers.CharField(allow_null=True)
    usage = JSONObjectField(help_text="Token usage reported by the model.")
    memory = JSONObjectField(help_text="What memory did: history ids, recalled messages, working memory.")
    pending = PendingCallSerializer(
        allow_null=True,
        help_text="The tool call a suspended turn waits on (decide it at pending/<id>/); null otherwise.",
    )


def generate_result_data(result: Any) -> dict[str, Any]:
    """`GenerateResultSerializer(result).data`, rendered by one serializer that every turn shares: a new
    serializer deep-copies its declared fields, which cost 9x the rendering itself (140 against
    16 µs). Rendering only reads the bound fields, so threads may share them."""
    return _GENERATE_RESULT.to_representation(result)


_GENERATE_RESULT = GenerateResultSerializer()


TURN_MANIFEST_SCHEMA = {
    "type": "object",
    "description": "Why the model saw what it saw: ids and numbers, never message text.",
    "properties": {
        "history": {"type": "array", "items": {"type": "string"}, "description": "History message ids."},
        "recalled": {
            "type": "array",
            "description": "Messages semantic recall added, with their score and source thread.",
            "items": {
                "type": "object",
                "properties": {
                    "id": {"type": "string"},
                    "thread_id": {"type": "string", "nullable": True},
                    "score": {"type": "number", "nullable": True},
                },
            },
        },
        "recall_error": {"type": "boolean", "description": "Recall failed; the turn ran without it."},
        "searches": {
            "type": "array",
            "description": "The model's search_memory calls (only when it made some): scope, query length "
            "(never its text), hits with score and source thread, hits a guardrail withheld, why a call was "
            "refused.",
            "items": {
                "type": "object",
                "properties": {
                    "scope": {"type": "string", "enum": ["thread", "resource"]},
                    "query_chars": {"type": "integer"},
                    "hits": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "id": {"type": "string"},
                                "thread_id": {"type": "string", "nullable": True},
                                "score": {"type": "number"},
                            },
                        },
                    },
                    "withheld": {"type": "array", "items": {"type": "string"}},
                    "error": {"type": "string"},
                },
            },
        },
        "echoed": {"type": "integer", "description": "Messages the client re-sent that were already stored."},
        "working_memory": {
            "type": "object",
            "nullable": True,
            "description": "The working memory the model was given.",
            "properties": {
                "scope": {"type": "string", "enum": ["thread", "resource"]},
                "key": {"type": "string"},
                "version": {"type": "integer"},
            },
        },
        "tokens": {
            "type": "object",
            "nullable": True,
            "description": "Token counts after the token limiter, when there is one.",
            "properties": {
                "total": {"type": "integer"},
                "limit": {"type": "integer"},
                "dropped": {"type": "integer", "description": "History messages dropped to fit."},
            },
        },
        "processors": {
            "type": "array",
            "description": "Time spent in each processor hook.",
            "items": {
                "type": "object",
                "properties": {
                    "processor": {"type": "string"},
                    "hook": {"type": "string"},
                    "ms": {"type": "number"},
                    "calls": {"type": "integer"},
                },
            },
        },
    },
    "additionalProperties": True,
}


@extend_schema_field(TURN_MANIFEST_SCHEMA)
class TurnManifestField(serializers.JSONField):
    pass


class TurnRecordSerializer(serializers.ModelSerializer):
    usage = JSONObjectField(read_only=True, help_text="Token usage the model reported, summed over steps.")
    manifest = TurnManifestField(read_only=True)
    message_ids = serializers.ListField(
        child=serializers.CharField(), read_only=True, help_text="The messages this turn saved."
    )
    tripwire_id = serializers.UUIDField(
        read_only=True, allow_null=True, help_text="The tripwire log of a blocked turn."
    )

    class Meta:
        model = models.TurnRecord
        fields = [
            "id",
            "agent_id",
            "thread_id",
            "resource_id",
            "status",
            "model",
            "steps",
            "usage",
            "manifest",
            "message_ids",
            "tripwire_id",
            "error",
            "started_at",
            "duration_ms",
        ]
        read_only_fields = fields


class TurnRecordPageSerializer(serializers.Serializer):
    """One page of a thread's turn records, newest first (cursor pagination)."""

    next = serializers.URLField(allow_null=True)
    previous = serializers.URLField(allow_null=True)
    results = TurnRecordSerializer(many=True)
