"""A purge leaves nothing of a resource's conversation behind (finding 9 of the hostile review: the
answer kept for an `Idempotency-Key` held the user's messages, and a repeat with the same key replayed
them for 24 hours after `memproc_purge <resource> --yes`). Deleting a thread drops the answers of its
turns too."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.apps import apps
from django.core.management import call_command

from memproc import models
from tests.api.conftest import API

pytestmark = pytest.mark.django_db

GENERATE = API + "agents/api-test/generate/"
STREAM = API + "agents/api-test/stream/"
SECRET = "my card number is 4111-1111-1111-1111"


def send(client: Any, url: str, body: dict[str, Any], key: str) -> tuple[Any, dict[str, Any]]:
    """The response and the turn's result (the `finish` event's data for a stream)."""
    response = client.post(url, body, format="json", HTTP_IDEMPOTENCY_KEY=key)
    assert response.status_code == 200, response.content
    if url == GENERATE:
        return response, response.json()
    raw = b"".join(response.streaming_content).decode()
    for block in raw.split("\n\n"):
        if block.startswith("event: finish"):
            return response, json.loads(block.split("data: ", 1)[1])
    raise AssertionError(f"no finish event in {raw!r}")


def rows_holding(text: str) -> list[str]:
    """Every stored row, of any installed model, whose values hold `text`."""
    found = []
    for model_class in apps.get_models():
        for row in model_class._default_manager.values():
            if text in json.dumps(row, default=str):
                found.append(f"{model_class._meta.label} {row.get('id', row)}")
    return found


@pytest.mark.parametrize("url", [GENERATE, STREAM])
def test_a_purged_resources_key_runs_as_a_new_request_and_no_row_holds_its_text(
    owner_client, agent, model, resource, url
):
    model.add("Noted, Sir.", "A new turn, after the purge")
    body = {"messages": SECRET, "thread_id": "t-purge"}
    _, first = send(owner_client, url, body, key="purge-key")
    assert first["text"] == "Noted, Sir." and rows_holding(SECRET)

    call_command("memproc_purge", resource.pk, "--yes")

    assert rows_holding(SECRET) == [] and rows_holding("Noted, Sir.") == []
    again, second = send(owner_client, url, body, key="purge-key")
    assert "Idempotent-Replayed" not in again
    assert second["text"] == "A new turn, after the purge" and model.calls == 2


def test_the_dry_run_counts_the_kept_answers(owner_client, agent, model, resource, capsys):
    model.add("Noted.")
    send(owner_client, GENERATE, {"messages": SECRET, "thread_id": "t-count"}, key="count-key")
    call_command("memproc_purge", resource.pk)
    assert "1  answers kept for Idempotency-Key retries" in capsys.readouterr().out
    assert models.IdempotencyRecord.objects.count() == 1  # a dry run deletes nothing


def test_another_resources_kept_answers_stay(owner_client, agent, model, resource):
    model.add("Noted.")
    send(owner_client, GENERATE, {"messages": SECRET, "thread_id": "t-other"}, key="other-key")
    call_command("memproc_purge", "somebody-else", "--yes")
    assert models.IdempotencyRecord.objects.count() == 1


@pytest.mark.parametrize("url", [GENERATE, STREAM])
def test_deleting_a_thread_drops_the_answers_of_its_turns(owner_client, agent, model, resource, url):
    model.add("In the doomed thread", "In the kept thread", "Run again")
    doomed = {"messages": SECRET, "thread_id": "t-doomed"}
    send(owner_client, url, doomed, key="doomed-key")
    send(owner_client, url, {"messages": "hello", "thread_id": "t-kept"}, key="kept-key")

    assert owner_client.delete(API + "threads/t-doomed/").status_code == 204

    assert rows_holding(SECRET) == [] and rows_holding("In the doomed thread") == []
    assert rows_holding("In the kept thread") != []  # the other thread's answer is still replayed
    again, result = send(owner_client, url, doomed, key="doomed-key")
    assert "Idempotent-Replayed" not in again and result["text"] == "Run again"
