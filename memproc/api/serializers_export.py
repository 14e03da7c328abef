"""Serializers of the branch and export endpoints (the input of one, the OpenAPI shape of both)."""

from __future__ import annotations

from rest_framework import serializers

from memproc.api.serializers import IdField

EXPORT_DOCUMENT_SCHEMA = {
    "type": "object",
    "description": (
        'Everything stored for the resource: {"format": "memproc.export", "version": 1, "exported_at", '
        '"resource", "threads" (each with its "messages"), "working_memory_revisions", "turn_records", '
        '"tripwire_logs", "attachments" (metadata and a download "url")}. Threads are named by their '
        "thread id, within the resource. `manage.py memproc_import` reads it back."
    ),
    "properties": {
        "format": {"type": "string", "enum": ["memproc.export"]},
        "version": {"type": "integer", "enum": [1]},
        "exported_at": {"type": "string", "format": "date-time"},
        "resource": {"type": "object", "additionalProperties": True},
        "threads": {"type": "array", "items": {"type": "object", "additionalProperties": True}},
        "working_memory_revisions": {
            "type": "array",
            "items": {"type": "object", "additionalProperties": True},
        },
        "turn_records": {"type": "array", "items": {"type": "object", "additionalProperties": True}},
        "tripwire_logs": {"type": "array", "items": {"type": "object", "additionalProperties": True}},
        "attachments": {"type": "array", "items": {"type": "object", "additionalProperties": True}},
    },
    "required": ["format", "version", "resource", "threads"],
}


class ThreadBranchSerializer(serializers.Serializer):
    message_id = serializers.CharField(
        max_length=255,
        trim_whitespace=False,
        help_text="The branch holds the thread's messages up to and including this one.",
    )
    id = IdField(required=False, help_text="The new thread's id; generated when omitted.")
    title = serializers.CharField(required=False, allow_blank=True, max_length=255)
