"""memproc's stored data: resources, threads, messages, working memory, embeddings, tripwires, files.

Import from here (`from memproc.models import Thread`); the modules are `threads` (resources,
threads, the thread key, messages), `working_memory` (its revisions), `embeddings`, `review`
(tripwire logs, turn records), `files` (attachments), `forgetting` (forget receipts), `outbox`,
`idempotency`, `summaries` (thread summaries and their revisions) and `approvals` (tool calls that
wait for a decision).
"""

# USER_LINK: memproc's links to users (who edited, who reviewed) carry no database constraint and are
# cleared by memproc.signals' receiver when a user is deleted, not by Django's delete collector: a site
# may keep memproc's tables in a database of their own (a router), apart from its users, and neither
# a constraint nor the collector can reach across databases.

from memproc.models.approvals import PendingToolCall
from memproc.models.embeddings import MessageEmbedding
from memproc.models.files import Attachment, attachment_upload_to
from memproc.models.forgetting import ForgetReceipt
from memproc.models.idempotency import IdempotencyRecord
from memproc.models.outbox import OutboxJob
from memproc.models.review import TripwireLog, TurnRecord
from memproc.models.summaries import SummaryRevision, ThreadSummary
from memproc.models.threads import (
    QUARANTINE_ACTIVE,
    THREAD_KEY_MAX_LENGTH,
    THREAD_KEY_SEPARATOR,
    Message,
    Resource,
    Thread,
    message_key,
    message_keys,
    public_message_id,
    public_thread_id,
    split_thread_key,
    thread_key,
)
from memproc.models.working_memory import WorkingMemoryRevision

__all__ = [
    "QUARANTINE_ACTIVE",
    "THREAD_KEY_MAX_LENGTH",
    "THREAD_KEY_SEPARATOR",
    "Attachment",
    "ForgetReceipt",
    "IdempotencyRecord",
    "Message",
    "MessageEmbedding",
    "OutboxJob",
    "PendingToolCall",
    "Resource",
    "SummaryRevision",
    "Thread",
    "ThreadSummary",
    "TripwireLog",
    "TurnRecord",
    "WorkingMemoryRevision",
    "attachment_upload_to",
    "message_key",
    "message_keys",
    "public_message_id",
    "public_thread_id",
    "split_thread_key",
    "thread_key",
]
