"""Realistic admin data: a 200-message thread with tool calls and stored attachments, blocked turns,
working-memory revisions and embeddings."""

from __future__ import annotations

import hashlib
import struct
import zlib
from dataclasses import dataclass
from datetime import timedelta

import pytest
from django.core.files.base import ContentFile
from django.utils import timezone

from memproc import models
from memproc.services.working_memory import working_memory_update
from memproc.testing import HashEmbedder
from tests.factories import ResourceFactory, ThreadFactory, TripwireLogFactory


def png_square(size: int = 48, rgb: tuple[int, int, int] = (65, 118, 144)) -> bytes:
    """A real PNG (a filled square), so the preview and the screenshot show an image."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    row = b"\x00" + bytes(rgb) * size
    header = struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(row * size))
        + chunk(b"IEND", b"")
    )


PNG_BYTES = png_square()
NOTES_TEXT = "Shipping notes <script>alert('x')</script>\n" + "line of notes\n" * 600


@pytest.fixture(autouse=True)
def attachment_storage(settings, tmp_path):
    """Attachments on a throwaway directory; the storage setting change resets memproc's storage."""
    settings.STORAGES = {
        **settings.STORAGES,
        "memproc_attachments": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": tmp_path / "attachments", "base_url": "/media/attachments/"},
        },
    }
    return tmp_path / "attachments"


def store_attachment(
    *, resource_id: str, message: models.Message | None, name: str, content_type: str, data: bytes
) -> models.Attachment:
    attachment = models.Attachment(
        resource_id=resource_id,
        message=message,
        name=name,
        content_type=content_type,
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
    )
    attachment.file.save(name, ContentFile(data), save=True)
    return attachment


def turn_messages(
    thread: models.Thread, *, turns: int, start: int = 1, id_prefix: str = ""
) -> list[models.Message]:
    """`turns` turns of four messages: a question, a tool call, its result, an answer. Message ids
    start with `id_prefix`, by default the thread id."""
    now = timezone.now() - timedelta(hours=1)
    rows: list[models.Message] = []
    prefix = id_prefix or thread.public_id

    def add(role: str, parts: list[dict], text: str = "", tokens: int | None = None) -> models.Message:
        seq = start + len(rows)
        row = models.Message(
            id=models.message_key(thread.resource_id, f"{prefix}-m{seq}"),
            public_id=f"{prefix}-m{seq}",
            thread=thread,
            resource_id=thread.resource_id,
            role=role,
            content={"parts": parts},
            text=text,
            token_count=tokens,
            sequence=seq,
            created_at=now + timedelta(seconds=seq),
        )
        rows.append(row)
        return row

    for turn in range(turns):
        question = f"Where is my order number {turn}?"
        add("user", [{"type": "text", "text": question}], question, 9)
        add(
            "assistant",
            [
                {
                    "type": "tool-call",
                    "tool_call_id": f"call_{turn}",
                    "tool_name": "lookup_order",
                    "args": {"order": turn, "fields": ["status", "eta"]},
                }
            ],
            "",
            14,
        )
        add(
            "tool",
            [
                {
                    "type": "tool-result",
                    "tool_call_id": f"call_{turn}",
                    "tool_name": "lookup_order",
                    "result": {"status": "shipped", "eta": f"day {turn}"},
                    "is_error": False,
                }
            ],
            "",
            11,
        )
        answer = f"Order {turn} has shipped and arrives on day {turn}."
        add("assistant", [{"type": "text", "text": answer}], answer, 12)
    return rows


@dataclass
class Conversation:
    thread: models.Thread
    messages: list[models.Message]
    text_attachment: models.Attachment
    image_attachment: models.Attachment
    pending: models.TripwireLog
    not_stored: models.TripwireLog


@pytest.fixture
def conversation(db) -> Conversation:
    resource = ResourceFactory(id="user-42")
    thread = ThreadFactory(
        public_id="support-chat", resource=resource, title="Late parcel", agent_id="support"
    )
    rows = models.Message.objects.bulk_create(turn_messages(thread, turns=50))
    models.Thread.objects.filter(pk=thread.pk).update(last_sequence=len(rows))

    first = rows[0]
    text_attachment = store_attachment(
        resource_id=resource.pk,
        message=first,
        name="notes.txt",
        content_type="text/plain",
        data=NOTES_TEXT.encode(),
    )
    image_attachment = store_attachment(
        resource_id=resource.pk, message=first, name="parcel.png", content_type="image/png", data=PNG_BYTES
    )
    first.content = {
        "parts": [
            *first.content["parts"],
            {
                "type": "attachment",
                "attachment_id": str(text_attachment.pk),
                "name": "notes.txt",
                "media_type": "text/plain",
                "size": text_attachment.size,
            },
            {
                "type": "attachment",
                "attachment_id": str(image_attachment.pk),
                "name": "parcel.png",
                "media_type": "image/png",
                "size": image_attachment.size,
            },
            {"type": "file", "url": "javascript:alert(1)", "media_type": "text/html", "name": "evil.html"},
        ]
    }
    first.save(update_fields=["content"])

    embedder = HashEmbedder(dimensions=64)
    models.MessageEmbedding.objects.bulk_create(
        models.MessageEmbedding(
            message=m,
            thread_id=thread.public_id,  # an embedding names its thread by (resource id, thread id)
            resource_id=resource.pk,
            model=embedder.id,
            dimensions=64,
            content_hash=hashlib.sha256(m.text.encode()).hexdigest(),
            vector=embedder.embed([m.text])[0],
        )
        for m in rows[:20]
        if m.text
    )
    for value in ("# User\n- Name: Ada\n", "# User\n- Name: Ada\n- Location: Lisbon\n"):
        working_memory_update(scope="resource", key=resource.pk, value=value, source="model")
    working_memory_update(scope="thread", key=thread.pk, value="Order 7 is late.", source="api")

    pending = TripwireLogFactory(
        agent_id="support",
        processor_id="pii-detector",
        phase="input",
        reason="Message contains a card number",
        thread_id=thread.public_id,  # a log names its thread by (resource id, thread id)
        resource_id=resource.pk,
        metadata={"detected": ["card"], "score": 0.97},
        content=[
            {
                "id": "blocked-1",
                "role": "user",
                "parts": [{"type": "text", "text": "My card is 4111 1111 1111 1111"}],
            }
        ],
    )
    not_stored = TripwireLogFactory(
        agent_id="support",
        processor_id="moderation",
        phase="output",
        reason="Unsafe answer",
        thread_id="never-saved-thread",
        resource_id=resource.pk,
        content=None,
    )
    thread.refresh_from_db()
    return Conversation(thread, rows, text_attachment, image_attachment, pending, not_stored)


@pytest.fixture
def crowded(conversation):
    """The conversation, and the rows of a busy site beside it (tests/admin/crowded_data.py)."""
    from tests.admin.crowded_data import make_crowded  # it imports this module

    return make_crowded(conversation)
