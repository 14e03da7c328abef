"""Messages a user excluded from recall (`Message.recall_excluded`, the memory view): semantic recall
leaves them out as hits and as neighbours, even while a vector store still holds their vectors; the
thread's history keeps them. On SQLite (NumPy search) and PostgreSQL (pgvector): `--db=postgres`."""

from __future__ import annotations

import json

import pytest

from memproc import Memory, models
from memproc.services.memory_view import message_recall_exclude
from tests.memory.test_semantic_recall import TOPICS, R, history_texts, seed, system_texts

pytestmark = pytest.mark.django_db

QUESTION = "what is my favourite colour deep ocean blue"


def prompt(model) -> str:
    return " ".join([*system_texts(model), *history_texts(model)])


def test_recall_leaves_an_excluded_message_out_even_with_its_vectors_still_stored(
    make_agent, model, committing
):
    memory = Memory(last_messages=5, semantic_recall={"top_k": 2, "message_range": 1})
    colour, neighbour = seed(memory, committing, thread_id="old", texts=[TOPICS[0], TOPICS[3]])
    # As if the vectors had outlived the flag (another vector store, a job that raced it): the SQL
    # that loads hits and their neighbours is what keeps the message out.
    models.Message.objects.filter(public_id=colour.id).update(recall_excluded=True)
    assert models.MessageEmbedding.objects.filter(message__public_id=colour.id).exists()
    model.add("ok")
    result = make_agent(memory=memory).generate(QUESTION, thread_id="new", resource_id=R)
    assert TOPICS[0] not in prompt(model)
    assert colour.id not in [hit["id"] for hit in result.memory.get("recalled", [])]


def test_an_excluded_message_is_no_neighbour_either_and_history_keeps_it(make_agent, model, committing):
    memory = Memory(last_messages=5, semantic_recall={"top_k": 1, "message_range": 1})
    colour, neighbour = seed(memory, committing, thread_id="old", texts=[TOPICS[0], TOPICS[3]])
    message_recall_exclude(resource_id=R, message_id=neighbour.id, excluded=True)
    model.add("ok", "ok")
    agent = make_agent(memory=memory)
    agent.generate(QUESTION, thread_id="new", resource_id=R)
    assert TOPICS[0] in prompt(model) and TOPICS[3] not in prompt(model)
    agent.generate("and then?", thread_id="old", resource_id=R)
    assert TOPICS[3] in history_texts(model)  # the thread's own history still shows it


def test_excluding_is_idempotent_and_including_embeds_again(committing):
    memory = Memory(semantic_recall=True)
    (colour,) = seed(memory, committing, thread_id="old", texts=[TOPICS[0]])
    message_recall_exclude(resource_id=R, message_id=colour.id, excluded=True)
    assert message_recall_exclude(resource_id=R, message_id=colour.id, excluded=True).recall_excluded
    assert not models.MessageEmbedding.objects.filter(message__public_id=colour.id).exists()
    with committing():
        message_recall_exclude(resource_id=R, message_id=colour.id, excluded=False)
    assert models.MessageEmbedding.objects.filter(message__public_id=colour.id).exists()
    with pytest.raises(models.Message.DoesNotExist):
        message_recall_exclude(resource_id="someone-else", message_id=colour.id, excluded=True)


def test_pins_and_exclusions_travel_with_the_export(committing):
    from memproc.services.export import resource_import
    from memproc.services.memory_view import resource_field_pin

    memory = Memory(semantic_recall=True)
    colour, other = seed(memory, committing, thread_id="old", texts=[TOPICS[0], TOPICS[3]])
    message_recall_exclude(resource_id=R, message_id=colour.id, excluded=True)
    resource_field_pin(resource_id=R, name="Location", pinned=True)
    document = json.loads(json.dumps(memory.export(resource_id=R)))
    models.Resource.objects.filter(pk=R).delete()
    with committing():
        resource_import(document=document)
    assert models.Resource.objects.get(pk=R).pinned_fields == ["Location"]
    assert list(models.Message.objects.filter(recall_excluded=True).values_list("public_id", flat=True)) == [
        colour.id
    ]
    # Embeddings are rebuilt for the others only.
    assert list(models.MessageEmbedding.objects.values_list("message__public_id", flat=True)) == [other.id]
