"""List pages make a fixed number of queries, however many rows they show."""

from __future__ import annotations

import hashlib

import pytest
from django.contrib.admin.utils import quote
from django.contrib.auth import get_user_model
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from memproc import models
from memproc.testing import HashEmbedder
from tests.admin.conftest import store_attachment, turn_messages
from tests.factories import ResourceFactory, ThreadFactory, TripwireLogFactory

pytestmark = pytest.mark.django_db

CHANGELISTS = (
    "resource",
    "thread",
    "message",
    "tripwirelog",
    "attachment",
    "workingmemoryrevision",
    "messageembedding",
)


def add_rows(count: int, offset: int) -> None:
    """`count` more of every kind of row, each thread with its own resource, messages and logs."""
    embedder = HashEmbedder(dimensions=8)
    reviewer, _ = get_user_model().objects.get_or_create(username="reviewer")
    for i in range(offset, offset + count):
        resource = ResourceFactory(id=f"r{i}")
        thread = ThreadFactory(public_id=f"t{i}", resource=resource, agent_id=f"agent-{i % 3}")
        messages = models.Message.objects.bulk_create(turn_messages(thread, turns=1))
        store_attachment(
            resource_id=resource.pk,
            message=messages[0],
            name=f"f{i}.txt",
            content_type="text/plain",
            data=f"file {i}".encode(),
        )
        TripwireLogFactory(
            thread_id=thread.public_id, resource_id=resource.pk, reviewed_by=reviewer, status="confirmed"
        )
        models.WorkingMemoryRevision.objects.create(
            scope="thread",
            key=thread.pk,
            old="",
            new=f"v{i}",
            version=1,
            source="model",
            actor=reviewer,
            thread_id=thread.pk,
        )
        models.MessageEmbedding.objects.create(
            message=messages[0],
            thread_id=thread.public_id,
            resource_id=resource.pk,
            model=embedder.id,
            dimensions=8,
            content_hash=hashlib.sha256(messages[0].text.encode()).hexdigest(),
            vector=embedder.embed([messages[0].text])[0],
        )


def queries_for(client, url: str) -> int:
    with CaptureQueriesContext(connection) as ctx:
        response = client.get(url)
    assert response.status_code == 200
    return len(ctx.captured_queries)


@pytest.mark.parametrize("model", CHANGELISTS)
def test_list_queries_do_not_grow_with_rows(admin_client, model):
    url = reverse(f"admin:memproc_{model}_changelist")
    add_rows(5, 0)
    few = queries_for(admin_client, url)
    add_rows(45, 5)
    many = queries_for(admin_client, url)
    assert many == few, f"{model}: {few} queries for 5 rows, {many} for 50"
    assert few <= 12


def test_thread_list_search_across_messages_is_bounded(admin_client, django_assert_max_num_queries):
    add_rows(20, 0)
    with django_assert_max_num_queries(10):
        response = admin_client.get(reverse("admin:memproc_thread_changelist") + "?q=order+number")
    assert response.status_code == 200 and response.context["cl"].result_count == 20


def test_thread_page_query_count_does_not_grow_with_messages(admin_client, conversation):
    url = reverse("admin:memproc_thread_change", args=[quote(conversation.thread.pk)])
    queries_for(admin_client, url)  # warms per-process caches (content types)
    before = queries_for(admin_client, url)
    models.Message.objects.bulk_create(turn_messages(conversation.thread, turns=50, start=201))
    assert queries_for(admin_client, url) == before


def test_embedding_list_never_loads_vectors(admin_client):
    add_rows(3, 0)
    with CaptureQueriesContext(connection) as ctx:
        admin_client.get(reverse("admin:memproc_messageembedding_changelist"))
    selects = [q["sql"] for q in ctx.captured_queries if "memproc_messageembedding" in q["sql"]]
    assert selects and not any('"vector"' in sql for sql in selects)
