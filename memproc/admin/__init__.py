"""memproc's admin pages, registered on `django.contrib.admin.site`.

Read-mostly: conversations read as transcripts, machine-written rows (messages, tripwire logs,
embeddings, attachments, working-memory revisions, turn records) are never edited by hand, and every
write goes through a service (thread deletes, working-memory edits, tripwire reviews, attachment deletes).
"""

from memproc.admin import (  # noqa: F401
    approvals,
    attachments,
    embeddings,
    forgetting,
    messages,
    outbox,
    summaries,
    threads,
    tripwires,
    turns,
    working_memory,
)
