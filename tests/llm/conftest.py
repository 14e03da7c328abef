"""Fixtures for the model adapters: a real loopback OpenAI-compatible server, and a clean environment."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from memproc.llm.registry import clear_cache
from memproc.testing.openai_server import OpenAICompatibleServer


@pytest.fixture(autouse=True)
def _no_openai_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A developer's own OPENAI_API_KEY must never leak into (or out of) these tests."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    clear_cache()
    yield
    clear_cache()


@pytest.fixture
def server() -> Iterator[OpenAICompatibleServer]:
    with OpenAICompatibleServer(api_key="test-key") as srv:
        yield srv
