"""The OpenAPI shape of the export endpoint's document."""

from __future__ import annotations

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
