"""The AI SDK's regenerate and edit replace stored messages only when the new turn saves (finding 5 of
the third hostile review: a regenerate whose model failed lost two messages; an edit of the first
message that a guardrail blocked emptied the thread)."""

from __future__ import annotations

from typing import Any

import pytest

from memproc.exceptions import ModelUnavailableError
from memproc.llm.types import ModelRequest
from memproc.testing import ScriptedModel
from tests.api.test_protocol_aisdk import FailingMidStream, chat, frames, stored, ui
from tests.factories import MessageFactory


class DownModel(ScriptedModel):
    def stream(self, request: ModelRequest) -> Any:
        raise ModelUnavailableError("provider answered 500")

    def generate(self, request: ModelRequest) -> Any:
        raise ModelUnavailableError("provider answered 500")


@pytest.fixture
def two_turns(thread: Any) -> Any:
    """The owner's thread with two answered turns (u1, a1, u2, a2)."""
    for sequence, (message_id, role, text) in enumerate(
        [
            ("u1", "user", "first"),
            ("a1", "assistant", "one"),
            ("u2", "user", "second"),
            ("a2", "assistant", "two"),
        ],
        start=1,
    ):
        MessageFactory(thread=thread, id=message_id, role=role, text=text, sequence=sequence)
    thread.last_sequence = 4
    thread.save(update_fields=["last_sequence"])
    return thread


def regenerate(client: Any, thread: Any) -> Any:
    """The AI SDK's "regenerate" of the last answer: the chat up to its user message."""
    return chat(
        client,
        thread.public_id,
        ui("u1", "user", "first"),
        ui("a1", "assistant", "one"),
        ui("u2", "user", "second"),
        trigger="regenerate-message",
    )


BEFORE = [
    ("u1", "user", "first"),
    ("a1", "assistant", "one"),
    ("u2", "user", "second"),
    ("a2", "assistant", "two"),
]


@pytest.mark.django_db
def test_a_regenerate_whose_model_fails_leaves_the_history(owner_client, make_agent, two_turns):
    make_agent(model=DownModel())
    response = regenerate(owner_client, two_turns)
    assert response.status_code == 502  # the provider failed before the first frame
    assert stored(two_turns.public_id) == BEFORE


@pytest.mark.django_db
def test_a_regenerate_whose_model_fails_mid_stream_leaves_the_history(owner_client, make_agent, two_turns):
    make_agent(model=FailingMidStream())
    chunks = frames(regenerate(owner_client, two_turns))
    assert chunks[-1]["type"] == "error"
    assert stored(two_turns.public_id) == BEFORE


@pytest.mark.django_db
def test_an_edit_that_a_guardrail_blocks_leaves_the_thread(owner_client, agent, model, two_turns):
    chunks = frames(
        chat(owner_client, two_turns.public_id, ui("u1", "user", "a forbidden edit"), messageId="u1")
    )
    assert any(c.get("type") == "data-tripwire" for c in chunks) or chunks[-1]["type"] == "finish"
    assert stored(two_turns.public_id) == BEFORE
    assert model.requests == []


@pytest.mark.django_db
def test_a_regenerate_that_saves_replaces_in_one_step_and_the_model_never_sees_the_old_answer(
    owner_client, agent, model, two_turns
):
    model.add("deux")
    response = regenerate(owner_client, two_turns)
    assert frames(response)[-1]["type"] == "finish"
    assert stored(two_turns.public_id) == [
        *BEFORE[:3],
        (stored(two_turns.public_id)[3][0], "assistant", "deux"),
    ]
    assert [m.text for m in model.requests[0].messages if m.role != "system"] == ["first", "one", "second"]


@pytest.mark.django_db
def test_an_edit_of_the_first_message_that_saves_replaces_everything_after_it(
    owner_client, agent, model, two_turns
):
    model.add("edited answer")
    response = chat(owner_client, two_turns.public_id, ui("u1", "user", "first, edited"), messageId="u1")
    assert frames(response)[-1]["type"] == "finish"
    rows = stored(two_turns.public_id)
    assert [(r[0], r[2]) for r in rows][0] == ("u1", "first, edited") and len(rows) == 2
    assert [m.text for m in model.requests[0].messages if m.role != "system"] == ["first, edited"]
