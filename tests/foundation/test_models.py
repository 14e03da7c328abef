import numpy as np
import pytest
from django.db import IntegrityError, connection, transaction

from memproc.exceptions import ValidationError
from memproc.models import (
    Message,
    MessageEmbedding,
    Resource,
    Thread,
    message_key,
    public_thread_id,
    split_thread_key,
    thread_key,
)

pytestmark = pytest.mark.django_db


def make_message(thread: Thread, seq: int, text: str = "hi") -> Message:
    return Message.objects.create(
        public_id=f"{thread.public_id}-m{seq}",
        thread=thread,
        resource_id=thread.resource_id,
        role="user",
        content={"parts": [{"type": "text", "text": text}]},
        text=text,
        sequence=seq,
    )


@pytest.fixture
def thread() -> Thread:
    resource = Resource.objects.create(id="user-1")
    return Thread.objects.create(public_id="t1", resource=resource, title="First")


def test_embedding_vector_round_trips(thread: Thread) -> None:
    message = make_message(thread, 1)
    vector = np.array([0.25, -0.5, 1.0], dtype=np.float32)
    MessageEmbedding.objects.create(
        message=message,
        thread_id=thread.public_id,
        resource_id=thread.resource_id,
        model="hash-3",
        dimensions=3,
        content_hash="x",
        vector=vector,
    )
    stored = MessageEmbedding.objects.get(message=message)
    assert stored.vector.dtype == np.float32
    np.testing.assert_allclose(stored.vector, vector)


def test_message_sequence_is_unique_per_thread(thread: Thread) -> None:
    make_message(thread, 1)
    other = Thread.objects.create(public_id="t2", resource=thread.resource)
    make_message(other, 1)  # the same sequence in another thread is fine
    with pytest.raises(IntegrityError), transaction.atomic():
        Message.objects.create(public_id="dup", thread=thread, resource_id="user-1", role="user", sequence=1)


@pytest.mark.postgres
def test_postgres_column_is_pgvector_and_orders_by_cosine_distance(thread: Thread) -> None:
    for i, vec in enumerate(([1, 0, 0], [0, 1, 0], [0.9, 0.1, 0])):
        MessageEmbedding.objects.create(
            message=make_message(thread, i),
            thread_id=thread.public_id,
            resource_id=thread.resource_id,
            model="m",
            dimensions=3,
            content_hash=str(i),
            vector=np.array(vec, dtype=np.float32),
        )
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
            "WHERE attrelid = 'memproc_messageembedding'::regclass AND attname = 'vector'"
        )
        assert cursor.fetchone()[0] == "vector"
        cursor.execute(
            "SELECT message_id FROM memproc_messageembedding ORDER BY vector <=> %s::vector LIMIT 2",
            ["[1,0,0]"],
        )
        assert [r[0] for r in cursor.fetchall()] == [
            message_key("user-1", "t1-m0"),
            message_key("user-1", "t1-m2"),
        ]


def test_a_thread_is_named_by_its_id_within_its_resource(thread: Thread) -> None:
    """`public_id` is the id callers use (DESIGN §3); the primary key `id` joins resource and
    public id, so another resource may use the same public id, and the same resource may not use it
    twice."""
    twin = Thread.objects.create(public_id="t1", resource=Resource.objects.create(id="user-2"))
    assert (thread.public_id, twin.public_id) == ("t1", "t1")
    assert (thread.pk, twin.pk) == (thread_key("user-1", "t1"), thread_key("user-2", "t1"))
    assert (thread.id, twin.id) == (thread.pk, twin.pk)
    assert split_thread_key(twin.pk) == ("user-2", "t1") and public_thread_id(twin.pk) == "t1"
    with pytest.raises(IntegrityError), transaction.atomic():
        Thread.objects.create(public_id="t1", resource=thread.resource)


def test_threads_and_messages_query_as_a_django_developer_expects(thread: Thread) -> None:
    """`id`/`pk` is the primary key, lookups and joins by it work, and the caller's thread id is a
    field with its own name (the renovation issue: `Thread.objects.filter(id=...)` used to fail)."""
    message = Message.objects.create(
        public_id="m1", thread=thread, resource_id="user-1", role="user", content={}, sequence=1
    )
    assert Thread.objects.get(id=thread.id) == thread
    assert Thread.objects.get(public_id="t1", resource_id="user-1") == thread
    assert list(Message.objects.filter(thread__id=thread.id)) == [message]
    assert list(Message.objects.filter(thread=thread)) == [message]
    assert list(Message.objects.filter(thread__public_id="t1", thread__resource_id="user-1")) == [message]
    assert list(Thread.objects.filter(id="t1")) == []  # the public id alone names no row
    assert {f.name for f in Thread._meta.fields if f.primary_key} == {"id"}
    # A message is named as a thread is: the caller's id in `public_id`, the key in `id`.
    assert message.pk == message.id == message_key("user-1", "m1")
    assert Message.objects.get(resource_id="user-1", public_id="m1") == message
    assert {f.name for f in Message._meta.fields if f.primary_key} == {"id"}


def test_a_resource_id_with_the_key_separator_is_refused() -> None:
    with pytest.raises(ValidationError):
        thread_key("a\x1fb", "t1")
    assert thread_key("user-1", "") == ""  # no thread: no key
