"""The embeddings of stored messages, searched by semantic recall."""

from __future__ import annotations

from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from memproc.fields import VectorField
from memproc.models.threads import Message


class MessageEmbedding(models.Model):
    id = models.BigAutoField(primary_key=True)
    message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="embeddings")
    # Denormalised so a scoped search filters this table alone: the thread id callers use, so a thread
    # scope always filters resource_id too.
    thread_id = models.CharField(max_length=255)
    resource_id = models.CharField(max_length=255)
    chunk = models.PositiveIntegerField(default=0)
    model = models.CharField(max_length=255, help_text=_("The embedder id."))
    dimensions = models.PositiveIntegerField()
    content_hash = models.CharField(max_length=64)
    vector = VectorField()
    created_at = models.DateTimeField(default=timezone.now)
    # PostgreSQL: in the embedder's partial HNSW index. The pgvector store writes False (no graph
    # insertion on the turn) and the background index merge marks them; searches scan the unmarked
    # tail exactly. Other writers get True: their rows enter the graph on insert, as they always did.
    indexed = models.BooleanField(default=True, db_default=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["message", "model", "chunk"], name="memproc_emb_msg_model_chunk"),
        ]
        indexes = [
            models.Index(fields=["model", "resource_id"], name="memproc_emb_model_res"),
            models.Index(fields=["model", "thread_id"], name="memproc_emb_model_thread"),
            models.Index(fields=["model", "content_hash"], name="memproc_emb_model_hash"),
        ]

    def __str__(self) -> str:
        return f"{self.message_id}#{self.chunk} ({self.model})"
