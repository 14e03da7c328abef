"""A model provider with no API key on the server: the turn answers a JSON 503 naming the cause in
general terms (the log has the details), never a 500, and nothing is saved; `manage.py check` warns
about the model and about an OpenAI embedder without a key before any request does."""

from typing import Any

import pytest
from django.core import checks
from django.test import override_settings

from memproc import Memory
from memproc.models import Message, Thread

pytestmark = pytest.mark.django_db

GENERATE = "/api/memproc/agents/no-key/generate/"
NO_KEY = {"MODELS": {"openai": {}}}


@pytest.fixture
def keyless(make_agent: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with override_settings(MEMPROC=NO_KEY):
        yield make_agent(id="no-key", model="openai/gpt-4o-mini", memory=Memory(last_messages=10))


@pytest.mark.parametrize("path", ["generate", "stream"])
def test_a_model_without_a_key_is_a_json_503_and_saves_nothing(
    keyless: Any, owner_client: Any, path: str, caplog: pytest.LogCaptureFixture
) -> None:
    response = owner_client.post(
        GENERATE.replace("generate", path), {"messages": "Hello", "thread_id": "t1"}, format="json"
    )
    assert response.status_code == 503, response.content
    body = response.json()
    assert body["code"] == "configuration_error" and "log" in body["detail"]
    assert "api_key" not in body["detail"]  # the settings' names stay in the log
    assert not Thread.objects.exists() and not Message.objects.exists()
    assert any("no API key" in r.getMessage() for r in caplog.records)


def test_check_warns_about_an_openai_embedder_without_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    settings = {"EMBEDDER": "memproc.embedders.OpenAIEmbedder", "MODELS": {"openai": {}}}
    with override_settings(MEMPROC=settings):
        found = [m for m in checks.run_checks() if m.id == "memproc.W003"]
    assert any("embedder" in m.msg.lower() for m in found), [m.msg for m in found]


def test_check_is_quiet_about_an_openai_embedder_with_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    settings = {"EMBEDDER": "memproc.embedders.OpenAIEmbedder"}
    with override_settings(MEMPROC=settings):
        found = [m for m in checks.run_checks() if m.id == "memproc.W003"]
    assert found == []


def test_check_names_an_agent_whose_own_recall_embedder_has_no_key(
    make_agent: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memproc.embedders import OpenAIEmbedder

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    make_agent(id="own-embedder", memory=Memory(semantic_recall=True, embedder=OpenAIEmbedder()))
    with override_settings(MEMPROC=NO_KEY):
        found = [m.msg for m in checks.run_checks() if m.id == "memproc.W003"]
    assert len(found) == 1 and "'own-embedder'" in found[0], found


def test_an_embedder_without_a_key_is_one_log_line_per_turn_not_a_traceback(
    make_agent: Any,
    model: Any,
    owner_client: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The model answers, recall cannot embed the query: the turn goes on without recall (200) and
    the log says why in one line, as it would on every turn until the key is set."""
    from memproc.embedders import OpenAIEmbedder

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    make_agent(id="no-key", memory=Memory(semantic_recall=True, embedder=OpenAIEmbedder()))
    model.add("answered")
    with override_settings(MEMPROC=NO_KEY):
        response = owner_client.post(GENERATE, {"messages": "Hello", "thread_id": "t1"}, format="json")
    assert response.status_code == 200 and response.json()["text"] == "answered"
    recall = [r for r in caplog.records if "semantic recall failed" in r.getMessage()]
    assert len(recall) == 1 and "ConfigurationError" in recall[0].getMessage()
    assert "Traceback" not in caplog.text
