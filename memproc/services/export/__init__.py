"""Export and import of everything stored for one resource, as versioned JSON (portability, backups,
moving a user between deployments or databases).

The document (`FORMAT`, `VERSION` 1)::

    {"format": "memproc.export", "version": 1, "exported_at": ...,
     "resource": {...}, "threads": [{..., "messages": [...]}], "working_memory_revisions": [...],
     "turn_records": [...], "tripwire_logs": [...], "pending_tool_calls": [...],
     "attachments": [{..., "file": ..., "url": ...}]}

Threads, and every row that names one, carry the thread id callers use, never the stored key: a
thread id names a thread within its resource, the document's (a turn record or tripwire log names
its resource beside it). Documents written before keys existed read the same way.
Times are ISO 8601 in UTC; users (a revision's actor, a review's reviewer) are named by username.
Embeddings are not exported: an import embeds the imported messages again after commit (one
`memproc.embed_messages` job per agent). Attachment bytes travel in a zip (`export.json` and
`files/<attachment id>`) written by `resource_export_zip` and read by `archive_read`, within
`ImportLimits` (sizes, member count, compression ratio, JSON nesting: `ImportRefused` past them).

`VOLATILE` names what differs between two exports of the same data: the time of the export and the
attachments' download URLs (signed ones expire). Everything else survives export, purge, import,
export unchanged.

Modules: `document` (writing the document), `archive` (the zip), `reader` (checking a document and
turning it into rows), `importer` (writing those rows).
"""

from memproc.services.export.archive import ImportLimits, ImportRefused, archive_read, resource_export_zip
from memproc.services.export.document import (
    ARCHIVE_DOCUMENT,
    FORMAT,
    VERSION,
    VOLATILE,
    resource_export,
    resource_export_chunks,
)
from memproc.services.export.importer import ImportConflict, ImportReport, resource_import

__all__ = [
    "ARCHIVE_DOCUMENT",
    "FORMAT",
    "VERSION",
    "VOLATILE",
    "ImportConflict",
    "ImportLimits",
    "ImportRefused",
    "ImportReport",
    "archive_read",
    "resource_export",
    "resource_export_chunks",
    "resource_export_zip",
    "resource_import",
]
