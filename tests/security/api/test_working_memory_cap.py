"""Working memory has a size cap on every write path (finding 13 of the third hostile review: 3 MiB of
working memory made the token limiter block every later turn)."""

from __future__ import annotations

from typing import Any

import pytest

from memproc import Memory, models
from memproc.exceptions import ValidationError
from memproc.llm.types import ModelResponse, ToolCall
from tests.api.conftest import API

HUGE = "# Notes\n" + "- remember this line\n" * 200


@pytest.fixture
def capped(settings: Any) -> None:
    settings.MEMPROC = {**getattr(settings, "MEMPROC", {}), "MAX_WORKING_MEMORY_CHARS": 1000}


@pytest.mark.django_db
def test_the_api_refuses_a_working_memory_over_the_cap(owner_client, thread, capped):
    url = f"{API}threads/{thread.public_id}/working-memory/"
    response = owner_client.put(url, {"working_memory": HUGE}, format="json")
    assert response.status_code == 400
    assert "1000 characters" in str(response.json())
    assert owner_client.get(url).json()["working_memory"] == ""
    assert not models.WorkingMemoryRevision.objects.exists()


@pytest.mark.django_db
def test_the_models_update_over_the_cap_is_refused_to_the_model_and_the_turn_goes_on(
    make_agent, model, resource, capped
):
    agent = make_agent(memory=Memory(working_memory={"scope": "thread"}))
    model.add(ModelResponse(tool_calls=[ToolCall("w1", "updateWorkingMemory", {"memory": HUGE})]), "noted")
    result = agent.generate("remember all of this", thread_id="t", resource_id=resource.pk)
    assert result.text == "noted"
    refusal = model.requests[1].messages[-1]
    assert refusal.role == "tool" and "1000 characters" in str(refusal.tool_results[0].result)
    assert not models.WorkingMemoryRevision.objects.exists()


@pytest.mark.django_db
def test_code_is_held_to_the_cap_too(resource, capped):
    memory = Memory(working_memory={"scope": "resource"})
    with pytest.raises(ValidationError, match="1000 characters"):
        memory.update_working_memory(HUGE, resource_id=resource.pk)
