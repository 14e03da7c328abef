"""factory_boy factories for memproc's models."""

from __future__ import annotations

import factory
from django.contrib.auth import get_user_model

from memproc import models


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.LazyAttribute(lambda u: f"{u.username}@example.com")
    password = factory.django.Password("pw")


class ResourceFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = models.Resource
        django_get_or_create = ("id",)

    id = factory.Sequence(lambda n: f"resource-{n}")


class ThreadFactory(factory.django.DjangoModelFactory):
    """`id=` names the thread id callers use (`public_id`); the primary key is derived from it."""

    class Meta:
        model = models.Thread

    public_id = factory.Sequence(lambda n: f"thread-{n}")
    resource = factory.SubFactory(ResourceFactory)
    title = factory.Sequence(lambda n: f"Conversation {n}")

    @classmethod
    def _adjust_kwargs(cls, **kwargs):
        if "id" in kwargs:
            kwargs["public_id"] = kwargs.pop("id")
        return kwargs


class MessageFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = models.Message

    # `id=` given to the factory is the message id callers use (`public_id`); the row's key is derived.
    id = factory.Sequence(lambda n: f"msg-{n}")
    thread = factory.SubFactory(ThreadFactory)
    resource_id = factory.LazyAttribute(lambda m: m.thread.resource_id)
    role = "user"
    text = factory.Sequence(lambda n: f"message {n}")
    content = factory.LazyAttribute(lambda m: {"parts": [{"type": "text", "text": m.text}]})
    sequence = factory.Sequence(lambda n: n + 1)

    @classmethod
    def _adjust_kwargs(cls, **kwargs):
        public_id = kwargs.pop("public_id", None) or kwargs["id"]
        kwargs.update(public_id=public_id, id=models.message_key(kwargs["resource_id"], public_id))
        return kwargs


class TripwireLogFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = models.TripwireLog

    agent_id = "support"
    processor_id = "max-length"
    phase = "input"
    reason = "Input longer than 10 characters"
    thread_id = "thread-x"
    resource_id = "resource-x"
    content = factory.LazyFunction(
        lambda: [{"id": "m1", "role": "user", "parts": [{"type": "text", "text": "blocked"}]}]
    )
