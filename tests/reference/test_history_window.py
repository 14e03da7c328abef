"""Issue 32's table, rerun: every turn's prompt holds exactly the newest min(N, stored) messages.

For every window N = 1..15 and every thread length 0..2N, through the Python drivers (sync and
async, plain and streamed) and, for two windows, through the HTTP endpoints (generate, stream,
Chat Completions, the AI SDK's chat). The database is the suite's (SQLite, or PostgreSQL with
`--db=postgres`).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from asgiref.sync import async_to_sync

from memproc import Agent, Memory
from memproc.agents import register, unregister
from memproc.messages import Message
from memproc.testing import ScriptedModel
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db(transaction=True)
API = "/api/memproc/"


def seeded(memory: Memory, *, thread_id: str, resource_id: str, size: int) -> list[str]:
    """A thread of `size` alternating user/assistant messages; returns their texts, oldest first."""
    texts = [f"{'user' if i % 2 == 0 else 'assistant'} message {i}" for i in range(size)]
    if texts:
        memory.save_messages(
            [Message.create("user" if i % 2 == 0 else "assistant", t) for i, t in enumerate(texts)],
            thread_id=thread_id,
            resource_id=resource_id,
        )
    return texts


def history_in(request: Any, new_text: str) -> list[str]:
    texts = [m.text for m in request.messages if m.role != "system"]
    assert texts[-1] == new_text
    return texts[:-1]


def run(agent: Agent, driver: str, text: str, **ids: str) -> None:
    if driver == "generate":
        agent.generate(text, **ids)
    elif driver == "stream":
        list(agent.stream(text, **ids))
    elif driver == "agenerate":
        async_to_sync(agent.agenerate)(text, **ids)
    else:

        async def drain() -> None:
            async for _ in agent.astream(text, **ids):
                pass

        async_to_sync(drain)()


@pytest.mark.parametrize("driver", ["generate", "stream", "agenerate", "astream"])
def test_every_window_and_thread_length(driver: str) -> None:
    for n in range(1, 16):
        memory = Memory(last_messages=n)
        for size in range(0, 2 * n + 1):
            ids = {"thread_id": f"w{n}-s{size}-{driver}", "resource_id": "window-user"}
            stored = seeded(memory, size=size, **ids)
            model = ScriptedModel(["answer"])
            agent = Agent(id="window", instructions="Be brief.", model=model, memory=memory)
            run(agent, driver, "the new question", **ids)
            assert history_in(model.requests[0], "the new question") == stored[-n:], (n, size)


def test_consecutive_turns_at_the_default_window() -> None:
    """The issue's table: with `Memory()` (last_messages=10), turn k sees all 2(k-1) earlier messages
    up to the window, then the newest 10."""
    model = ScriptedModel([f"answer {k}" for k in range(1, 9)])
    agent = Agent(id="window", instructions="Be brief.", model=model, memory=Memory())
    stored: list[str] = []
    for k in range(1, 9):
        agent.generate(f"question {k}", thread_id="default-window", resource_id="u")
        assert history_in(model.requests[-1], f"question {k}") == stored[-10:], k
        stored += [f"question {k}", f"answer {k}"]


# --- through the HTTP endpoints -------------------------------------------------------------------


def _generate(client: Any, thread_id: str, text: str) -> None:
    body = {"messages": text, "thread_id": thread_id}
    response = client.post(API + "agents/window-api/generate/", body, format="json")
    assert response.status_code == 200, response.content


def _stream(client: Any, thread_id: str, text: str) -> None:
    body = {"messages": text, "thread_id": thread_id}
    response = client.post(API + "agents/window-api/stream/", body, format="json")
    assert response.status_code == 200
    b"".join(response.streaming_content)


def _chat_completions(client: Any, thread_id: str, text: str) -> None:
    body = {
        "model": "window-api",
        "messages": [{"role": "user", "content": text}],
        "metadata": {"thread_id": thread_id},
    }
    response = client.post(API + "v1/chat/completions", body, format="json")
    assert response.status_code == 200, response.content


def _ai_sdk(client: Any, thread_id: str, text: str) -> None:
    body = {
        "id": thread_id,
        "messages": [
            {"id": f"ui-{thread_id}-{len(text)}", "role": "user", "parts": [{"type": "text", "text": text}]}
        ],
    }
    response = client.post(API + "agents/window-api/chat/", json.dumps(body), content_type="application/json")
    assert response.status_code == 200
    b"".join(response.streaming_content)


@pytest.mark.parametrize("endpoint", [_generate, _stream, _chat_completions, _ai_sdk])
@pytest.mark.parametrize("n", [3, 10])
def test_the_http_endpoints_send_the_same_window(endpoint: Any, n: int) -> None:
    from rest_framework.test import APIClient

    user = UserFactory()
    client = APIClient()
    client.force_authenticate(user)
    memory = Memory(last_messages=n)
    model = ScriptedModel()
    register(Agent(id="window-api", instructions="Be brief.", model=model, memory=memory), replace=True)
    try:
        for size in range(0, 2 * n + 1):
            thread_id = f"api-{endpoint.__name__}-{n}-{size}"
            stored = seeded(memory, thread_id=thread_id, resource_id=str(user.pk), size=size)
            model.add("answer")
            endpoint(client, thread_id, "the new question")
            assert history_in(model.requests[-1], "the new question") == stored[-n:], size
    finally:
        unregister("window-api")
