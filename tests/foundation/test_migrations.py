"""Data migrations: rows stored under an older schema come through an upgrade whole."""

from __future__ import annotations

import numpy as np
import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from memproc import models
from memproc.models import public_thread_id, split_thread_key, thread_key

BEFORE_THREAD_KEYS = ("memproc", "0009_embedding_indexed")


def migrate(target: list[tuple[str, str]]) -> MigrationExecutor:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()  # the graph reflects what was applied before
    executor.migrate(target)
    return MigrationExecutor(connection)  # a fresh loader for the new state


def latest() -> list[tuple[str, str]]:
    return MigrationExecutor(connection).loader.graph.leaf_nodes()


@pytest.mark.django_db(transaction=True)
def test_thread_ids_become_keys_within_their_resource_and_nothing_is_lost() -> None:
    newest = latest()
    try:
        executor = migrate([BEFORE_THREAD_KEYS])
        apps = executor.loader.project_state([BEFORE_THREAD_KEYS]).apps
        Resource = apps.get_model("memproc", "Resource")
        Thread = apps.get_model("memproc", "Thread")
        Message = apps.get_model("memproc", "Message")
        MessageEmbedding = apps.get_model("memproc", "MessageEmbedding")
        ThreadSummary = apps.get_model("memproc", "ThreadSummary")
        SummaryRevision = apps.get_model("memproc", "SummaryRevision")
        WorkingMemoryRevision = apps.get_model("memproc", "WorkingMemoryRevision")

        for resource_id, thread_id in (("r1", "a"), ("r2", "b")):
            resource = Resource.objects.create(id=resource_id)
            thread = Thread.objects.create(id=thread_id, resource=resource, title=f"Title {thread_id}")
            for sequence in (1, 2):
                message = Message.objects.create(
                    id=f"{thread_id}-m{sequence}",
                    thread=thread,
                    resource_id=resource_id,
                    role="user" if sequence == 1 else "assistant",
                    content={"parts": [{"type": "text", "text": f"{thread_id} {sequence}"}]},
                    text=f"{thread_id} {sequence}",
                    sequence=sequence,
                )
            MessageEmbedding.objects.create(
                message=message,
                thread_id=thread_id,
                resource_id=resource_id,
                model="m3",
                dimensions=3,
                content_hash=f"h-{thread_id}",
                vector=np.array([1.0, 0.0, 0.0], dtype=np.float32),
            )
        ThreadSummary.objects.create(thread_id="a", text="Summary of a", covered_sequence=1, token_count=3)
        SummaryRevision.objects.create(
            thread_id="a", version=1, text="Summary of a", covered_sequence=1, source="compaction"
        )
        WorkingMemoryRevision.objects.create(
            scope="thread", key="a", thread_id="a", old="", new="# Notes of a", version=1, source="model"
        )
        WorkingMemoryRevision.objects.create(
            scope="resource", key="r2", thread_id="b", old="", new="# Notes of r2", version=1, source="model"
        )

        migrate(newest)
    finally:
        migrate(newest)  # leave the database as every other test expects it

    a, b = thread_key("r1", "a"), thread_key("r2", "b")
    assert (a, b) == ("r1\x1fa", "r2\x1fb")
    threads = {t.pk: t for t in models.Thread.objects.all()}
    assert set(threads) == {a, b}
    assert [(threads[k].public_id, threads[k].resource_id, threads[k].title) for k in (a, b)] == [
        ("a", "r1", "Title a"),
        ("b", "r2", "Title b"),
    ]
    assert [split_thread_key(k) for k in (a, b)] == [("r1", "a"), ("r2", "b")]

    messages = {m.public_id: m for m in models.Message.objects.all()}
    assert {k: (m.thread_id, m.resource_id, m.sequence, m.text) for k, m in messages.items()} == {
        "a-m1": (a, "r1", 1, "a 1"),
        "a-m2": (a, "r1", 2, "a 2"),
        "b-m1": (b, "r2", 1, "b 1"),
        "b-m2": (b, "r2", 2, "b 2"),
    }
    assert list(
        models.Message.objects.filter(thread__public_id="a", thread__resource_id="r1")
        .order_by("sequence")
        .values_list("public_id", flat=True)
    ) == ["a-m1", "a-m2"]
    # Embeddings keep the public thread id beside their resource.
    assert sorted(models.MessageEmbedding.objects.values_list("message_id", "thread_id", "resource_id")) == [
        (models.message_key("r1", "a-m2"), "a", "r1"),
        (models.message_key("r2", "b-m2"), "b", "r2"),
    ]

    [summary] = models.ThreadSummary.objects.all()
    assert (summary.pk, summary.thread_id, summary.text, summary.covered_sequence, summary.token_count) == (
        a,
        a,
        "Summary of a",
        1,
        3,
    )
    assert models.Thread.objects.get(pk=a).summary.text == "Summary of a"
    assert list(models.SummaryRevision.objects.values_list("thread_id", "version", "text")) == [
        (a, 1, "Summary of a")
    ]

    revisions = sorted(
        models.WorkingMemoryRevision.objects.values_list("scope", "key", "thread_id", "new", "version")
    )
    assert revisions == [
        ("resource", "r2", b, "# Notes of r2", 1),  # a resource key is left alone; its thread moves
        ("thread", a, a, "# Notes of a", 1),
    ]
    assert public_thread_id(revisions[1][1]) == "a"
    assert models.Thread.objects.count() == 2 and models.Message.objects.count() == 4


@pytest.mark.django_db
def test_the_database_is_at_the_latest_migration() -> None:
    executor = MigrationExecutor(connection)
    assert executor.migration_plan(executor.loader.graph.leaf_nodes()) == []


BEFORE_KEPT_ANSWERS_NAME_THEIR_RESOURCE = ("memproc", "0014_hnsw_index_type")


@pytest.mark.django_db(transaction=True)
def test_answers_kept_before_the_upgrade_name_their_resource_and_thread() -> None:
    from datetime import timedelta

    from django.utils import timezone

    newest = latest()
    target = BEFORE_KEPT_ANSWERS_NAME_THEIR_RESOURCE
    try:
        executor = migrate([target])
        IdempotencyRecord = executor.loader.project_state([target]).apps.get_model(
            "memproc", "IdempotencyRecord"
        )
        expires = timezone.now() + timedelta(hours=1)
        answer = {"text": "hi", "thread_id": "t1", "resource_id": "r1", "messages": []}
        IdempotencyRecord.objects.create(
            scope="s", key="done", request_hash="h", state="done", response=answer, expires_at=expires
        )
        IdempotencyRecord.objects.create(scope="s", key="running", request_hash="h", expires_at=expires)
        migrate(newest)
        records = {r.key: (r.resource_id, r.thread_id) for r in models.IdempotencyRecord.objects.all()}
        assert records == {"done": ("r1", "t1"), "running": ("", "")}
    finally:
        models.IdempotencyRecord.objects.all().delete()
        migrate(newest)


BEFORE_MESSAGE_KEYS = ("memproc", "0017_thread_id_is_the_key")


def _seed_messages_before_keys(apps) -> None:
    """Two resources' threads with messages (global ids, as stored then), an embedding of each and an
    attachment linked to one."""
    Resource = apps.get_model("memproc", "Resource")
    Thread = apps.get_model("memproc", "Thread")
    Message = apps.get_model("memproc", "Message")
    MessageEmbedding = apps.get_model("memproc", "MessageEmbedding")
    Attachment = apps.get_model("memproc", "Attachment")
    for resource_id, message_id in (("r1", "m-one"), ("r2", "m-two")):
        resource = Resource.objects.create(id=resource_id)
        thread = Thread.objects.create(id=thread_key(resource_id, "t"), public_id="t", resource=resource)
        message = Message.objects.create(
            id=message_id,
            thread=thread,
            resource_id=resource_id,
            role="user",
            content={"parts": [{"type": "text", "text": f"said in {resource_id}"}]},
            text=f"said in {resource_id}",
            sequence=1,
        )
        MessageEmbedding.objects.create(
            message=message,
            thread_id="t",
            resource_id=resource_id,
            model="m3",
            dimensions=3,
            content_hash=f"h-{resource_id}",
            vector=np.array([1.0, 0.0, 0.0], dtype=np.float32),
        )
    Attachment.objects.create(
        resource_id="r1", message_id="m-one", name="a.txt", content_type="text/plain", size=1, sha256="x"
    )


@pytest.mark.django_db(transaction=True)
def test_message_ids_become_keys_within_their_resource_and_links_follow() -> None:
    newest = latest()
    try:
        executor = migrate([BEFORE_MESSAGE_KEYS])
        _seed_messages_before_keys(executor.loader.project_state([BEFORE_MESSAGE_KEYS]).apps)
        migrate(newest)

        one, two = models.message_key("r1", "m-one"), models.message_key("r2", "m-two")
        assert one == "r1\x1fm-one"
        rows = {m.pk: (m.public_id, m.resource_id, m.text) for m in models.Message.objects.all()}
        assert rows == {one: ("m-one", "r1", "said in r1"), two: ("m-two", "r2", "said in r2")}
        assert sorted(models.MessageEmbedding.objects.values_list("message_id", "resource_id")) == [
            (one, "r1"),
            (two, "r2"),
        ]
        assert list(models.Attachment.objects.values_list("message_id", flat=True)) == [one]
        # Now another resource may hold a message of the same id.
        models.Message.objects.create(
            id=models.message_key("r2", "m-one"),
            public_id="m-one",
            thread_id=thread_key("r2", "t"),
            resource_id="r2",
            role="assistant",
            text="r2's own m-one",
            sequence=2,
        )
        assert models.Message.objects.filter(public_id="m-one").count() == 2
        models.Message.objects.filter(resource_id="r2", public_id="m-one").delete()

        migrate([BEFORE_MESSAGE_KEYS])  # and back: the ids, the embeddings' and attachments' links
        apps = MigrationExecutor(connection).loader.project_state([BEFORE_MESSAGE_KEYS]).apps
        Message = apps.get_model("memproc", "Message")
        assert sorted(Message.objects.values_list("id", "resource_id")) == [("m-one", "r1"), ("m-two", "r2")]
        Embedding = apps.get_model("memproc", "MessageEmbedding")
        assert sorted(Embedding.objects.values_list("message_id", flat=True)) == ["m-one", "m-two"]
        Attachment = apps.get_model("memproc", "Attachment")
        assert list(Attachment.objects.values_list("message_id", flat=True)) == ["m-one"]
    finally:
        # Forward first: the current models may name columns a later migration adds.
        migrate(newest)
        models.Attachment.objects.all().delete()
        models.Thread.objects.all().delete()
        models.Resource.objects.all().delete()
