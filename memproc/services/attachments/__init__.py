"""Writes of attachments: files offloaded to the attachment storage, referenced from messages.

A file sent inline in a turn goes through these steps:

1. `AttachmentUploader` (input) checks it and stages it with `DjangoAttachmentStore.stage`: an
   existing row of the resource with the same sha256 is reused; otherwise the bytes are written under
   a name unique to a new attachment id. No row is written yet, so a blocked turn leaves none.
2. The turn commits: `attachments_commit` writes the rows inside the turn's transaction, before its
   messages, and `attachments_link` points each row at the first saved message referencing it.
3. The turn is blocked, fails or is abandoned: `attachments_discard` deletes the files it wrote.
   A process killed before either leaves its files with no row: the retention purge sweeps them
   once they are a day old (`orphan_files_purge`).

At prompt time `attachments_resolve` gives the model a URL or the bytes; that is never written back.
Deleting messages or threads releases files no other message references (`attachments_release`);
deleting a resource deletes all of its files (`attachments_delete`).

Modules: `files` (storage, storing outside a turn, URLs, request size checks), `turn` (a turn's
files), `resolve` (prompt time), `deletion`, `orphans` (files no row references).
"""

from memproc.services.attachments.deletion import attachments_delete, attachments_release
from memproc.services.attachments.download import attachment_download_response, attachment_download_url
from memproc.services.attachments.files import (
    REQUEST_ENVELOPE_BYTES,
    DjangoAttachmentStore,
    attachment_body_limit,
    attachment_check_size,
    attachment_delete,
    attachment_read,
    attachment_store,
    attachment_url,
)
from memproc.services.attachments.orphans import orphan_files_purge
from memproc.services.attachments.resolve import (
    OPENAI_INLINE_TYPES,
    attachment_model_options,
    attachments_resolve,
)
from memproc.services.attachments.turn import (
    attachment_links,
    attachments_commit,
    attachments_discard,
    attachments_link,
    messages_without_file_data,
)

__all__ = [
    "OPENAI_INLINE_TYPES",
    "REQUEST_ENVELOPE_BYTES",
    "DjangoAttachmentStore",
    "attachment_body_limit",
    "attachment_check_size",
    "attachment_delete",
    "attachment_download_response",
    "attachment_download_url",
    "attachment_links",
    "attachment_model_options",
    "attachment_read",
    "attachment_store",
    "attachment_url",
    "attachments_commit",
    "attachments_delete",
    "attachments_discard",
    "attachments_link",
    "attachments_release",
    "attachments_resolve",
    "messages_without_file_data",
    "orphan_files_purge",
]
