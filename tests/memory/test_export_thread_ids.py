"""Export and import where a thread id names a thread within its resource: three resources each have a
thread "support-1". A document carries thread ids, never the stored keys; an import creates threads
by (resource, thread id), so another resource's thread of the same id is no conflict; documents
written before keys existed read the same way."""

from __future__ import annotations

import json
from typing import Any

import pytest

from memproc import Memory
from memproc.exceptions import ValidationError
from memproc.models import (
    THREAD_KEY_SEPARATOR,
    Message,
    Thread,
    ThreadSummary,
    TripwireLog,
    TurnRecord,
    WorkingMemoryRevision,
    thread_key,
)
from memproc.selectors.threads import threads_named
from memproc.services.export import resource_export_chunks, resource_import
from memproc.services.purge import resource_purge
from tests.factories import TripwireLogFactory

pytestmark = pytest.mark.django_db
SHARED = "support-1"
ALPHA, BETA, GAMMA = "alpha", "beta", "gamma"


def strings(value: Any) -> list[str]:
    """Every string of a JSON value, keys included."""
    if isinstance(value, dict):
        return [*value, *(s for v in value.values() for s in strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return [value] if isinstance(value, str) else []


def stable(document: dict) -> dict:
    return {k: v for k, v in document.items() if k != "exported_at"}


@pytest.fixture
def shared(make_agent, model):
    """Alpha, beta and gamma each have a thread "support-1": a turn, thread working memory with a
    revision, a summary and a tripwire log, all their own."""
    memory = Memory(working_memory={"scope": "thread"})
    agent = make_agent(id="support", memory=memory)
    for resource_id in (ALPHA, BETA, GAMMA):
        model.add(f"Hello {resource_id}, how can I help?")
        agent.generate(f"{resource_id} needs help", thread_id=SHARED, resource_id=resource_id)
        memory.update_working_memory(f"- customer {resource_id}", thread_id=SHARED, resource_id=resource_id)
        ThreadSummary.objects.create(
            thread_id=thread_key(resource_id, SHARED),
            text=f"{resource_id} asked for help",
            covered_sequence=1,
        )
        TripwireLogFactory(resource_id=resource_id, thread_id=SHARED)
    return memory


def test_an_export_holds_only_the_resources_own_thread_and_no_key(shared):
    document = shared.export(resource_id=GAMMA)
    [thread] = document["threads"]
    assert thread["id"] == SHARED
    assert [m["text"] for m in thread["messages"]] == ["gamma needs help", "Hello gamma, how can I help?"]
    assert thread["summary"]["text"] == "gamma asked for help"
    assert thread["working_memory"] == "- customer gamma"
    [revision] = document["working_memory_revisions"]
    assert (revision["scope"], revision["key"], revision["new"]) == ("thread", SHARED, "- customer gamma")
    assert [t["thread_id"] for t in document["turn_records"]] == [SHARED]
    assert [t["thread_id"] for t in document["tripwire_logs"]] == [SHARED]
    assert not any(THREAD_KEY_SEPARATOR in s for s in strings(document))
    text = "".join(resource_export_chunks(resource_id=GAMMA))
    assert THREAD_KEY_SEPARATOR not in text and "\\u001f" not in text
    assert "alpha" not in text and "beta" not in text


def test_the_document_imports_while_two_other_resources_have_the_thread_id(shared, committing):
    document = shared.export(resource_id=GAMMA)
    with committing():
        resource_purge(resource_id=GAMMA)
    assert sorted(t.resource_id for t in threads_named(thread_id=SHARED)) == [ALPHA, BETA]
    report = resource_import(document=document, embed=False)
    assert report.created["threads"] == 1 and report.created["messages"] == 2
    thread = Memory().get_thread(SHARED, resource_id=GAMMA)
    assert (thread.pk, thread.public_id) == (thread_key(GAMMA, SHARED), SHARED)
    assert [m.text for m in thread.messages.order_by("sequence")] == [
        "gamma needs help",
        "Hello gamma, how can I help?",
    ]
    history = Memory().recall(thread_id=SHARED, resource_id=GAMMA, last_messages=10)
    assert [(m.thread_id, m.resource_id) for m in history] == [(SHARED, GAMMA)] * 2
    assert shared.get_working_memory(thread_id=SHARED, resource_id=GAMMA) == "- customer gamma"
    assert Memory().get_summary(thread_id=SHARED, resource_id=GAMMA).text == "gamma asked for help"
    revision = WorkingMemoryRevision.objects.get(new="- customer gamma")
    assert revision.key == thread_key(GAMMA, SHARED)
    assert stable(shared.export(resource_id=GAMMA)) == stable(document)
    for other in (ALPHA, BETA):  # untouched
        assert Message.objects.filter(thread_id=thread_key(other, SHARED)).count() == 2
        assert shared.get_working_memory(thread_id=SHARED, resource_id=other) == f"- customer {other}"


def test_importing_into_a_resource_that_holds_the_thread_id_keeps_its_thread(shared):
    document = shared.export(resource_id=GAMMA)
    Thread.objects.filter(pk=thread_key(GAMMA, SHARED)).update(title="kept")
    Message.objects.filter(thread_id=thread_key(GAMMA, SHARED), role="assistant").delete()
    report = resource_import(document=document, embed=False)
    assert (report.created["threads"], report.existing["threads"]) == (0, 1)
    assert (report.created["messages"], report.existing["messages"]) == (1, 1)
    assert Memory().get_thread(SHARED, resource_id=GAMMA).title == "kept"
    assert Message.objects.filter(thread_id=thread_key(GAMMA, SHARED)).count() == 2
    assert Thread.objects.filter(public_id=SHARED).count() == 3


def test_a_message_of_the_same_id_in_another_resources_thread_is_no_conflict(shared):
    """Message ids are per resource, as thread ids are (migration 0018): another resource's id is free."""
    document = shared.export(resource_id=GAMMA)
    resource_purge(resource_id=GAMMA)
    alphas = Message.objects.filter(thread_id=thread_key(ALPHA, SHARED)).order_by("sequence")
    document["threads"][0]["messages"][0]["id"] = alphas[0].public_id
    resource_import(document=document, embed=False)
    holders = Message.objects.filter(public_id=alphas[0].public_id).values_list("resource_id", flat=True)
    assert sorted(holders) == sorted([ALPHA, GAMMA])


def test_a_stored_key_in_place_of_a_thread_id_is_refused(shared):
    document = shared.export(resource_id=GAMMA)
    resource_purge(resource_id=GAMMA)
    document["threads"][0]["id"] = thread_key(GAMMA, SHARED)
    with pytest.raises(ValidationError, match=r"threads\[0\]\.id: expected a thread id"):
        resource_import(document=document)
    document = shared.export(resource_id=ALPHA) | {"resource": {**document["resource"], "id": "a\x1fb"}}
    with pytest.raises(ValidationError, match=r"resource\.id"):
        resource_import(document=document)


# --- a document written before thread keys existed ----------------------------------------------------

T0 = "2025-03-01T10:00:00+00:00"
T1 = "2025-03-01T10:00:05+00:00"
LEGACY = "legacy"


def legacy_document() -> dict[str, Any]:
    """An export as memproc wrote it when a thread's id was its primary key (format version 1)."""
    thread = {
        "id": SHARED,
        "summary": {"text": "The user lost a password.", "covered_sequence": 1, "token_count": 6},
        "title": "Password",
        "agent_id": "support",
        "metadata": {"channel": "mail"},
        "working_memory": "- locked out",
        "working_memory_version": 1,
        "last_sequence": 2,
        "created_at": T0,
        "updated_at": T1,
        "messages": [
            {
                "id": "legacy-1",
                "role": "user",
                "content": {"parts": [{"type": "text", "text": "I lost my password"}]},
                "text": "I lost my password",
                "token_count": 5,
                "created_at": T0,
                "sequence": 1,
            },
            {
                "id": "legacy-2",
                "role": "assistant",
                "content": {"parts": [{"type": "text", "text": "I can reset it."}]},
                "text": "I can reset it.",
                "token_count": 5,
                "created_at": T1,
                "sequence": 2,
            },
        ],
    }
    revision = {
        "id": "00000000-0000-4000-8000-000000000001",
        "scope": "thread",
        "key": SHARED,
        "old": "",
        "new": "- locked out",
        "version": 1,
        "source": "model",
        "actor": None,
        "thread_id": SHARED,
        "created_at": T1,
    }
    turn = {
        "id": "00000000-0000-4000-8000-000000000002",
        "agent_id": "support",
        "thread_id": SHARED,
        "resource_id": LEGACY,
        "status": "completed",
        "model": "scripted",
        "steps": 1,
        "usage": {},
        "manifest": {},
        "message_ids": ["legacy-1", "legacy-2"],
        "tripwire_id": None,
        "error": "",
        "started_at": T0,
        "duration_ms": 12.5,
    }
    tripwire = {
        "id": "00000000-0000-4000-8000-000000000003",
        "agent_id": "support",
        "processor_id": "pii",
        "phase": "input",
        "reason": "a card number",
        "retry": False,
        "metadata": {},
        "thread_id": SHARED,
        "resource_id": LEGACY,
        "content": None,
        "status": "pending",
        "reviewed_by": None,
        "reviewed_at": None,
        "note": "",
        "created_at": T0,
    }
    return {
        "format": "memproc.export",
        "version": 1,
        "exported_at": T1,
        "resource": {
            "id": LEGACY,
            "metadata": {},
            "working_memory": "",
            "working_memory_version": 0,
            "created_at": T0,
            "updated_at": T1,
        },
        "threads": [thread],
        "working_memory_revisions": [revision],
        "turn_records": [turn],
        "tripwire_logs": [tripwire],
        "attachments": [],
    }


def test_a_document_from_before_thread_keys_imports_beside_other_resources_threads(shared):
    document = legacy_document()
    report = resource_import(document=json.loads(json.dumps(document)), embed=False)
    assert report.created == {
        "resource": 1,
        "threads": 1,
        "messages": 2,
        "attachments": 0,
        "working_memory_revisions": 1,
        "turn_records": 1,
        "tripwire_logs": 1,
        "pending_tool_calls": 0,
    }
    key = thread_key(LEGACY, SHARED)
    thread = Memory().get_thread(SHARED, resource_id=LEGACY)
    assert (thread.pk, thread.public_id, thread.title, thread.last_sequence) == (key, SHARED, "Password", 2)
    assert list(Message.objects.filter(thread_id=key).values_list("public_id", flat=True)) == [
        "legacy-1",
        "legacy-2",
    ]
    assert ThreadSummary.objects.get(thread_id=key).text == "The user lost a password."
    revision = WorkingMemoryRevision.objects.get(pk=document["working_memory_revisions"][0]["id"])
    assert (revision.key, revision.thread_id) == (key, key)
    assert TurnRecord.objects.get(resource_id=LEGACY).thread_id == SHARED
    assert TripwireLog.objects.get(resource_id=LEGACY).thread_id == SHARED
    assert Memory().get_summary(thread_id=SHARED, resource_id=LEGACY).text == "The user lost a password."
    # Written again, the document gains what later versions of the format added as optional fields.
    current = {
        **document,
        "resource": {**document["resource"], "pinned_fields": []},
        "threads": [
            {**t, "archived_at": None, "messages": [{**m, "recall_excluded": False} for m in t["messages"]]}
            for t in document["threads"]
        ],
        "working_memory_revisions": [
            {**r, "turn_id": None, "message_ids": []} for r in document["working_memory_revisions"]
        ],
        "pending_tool_calls": [],
    }
    assert stable(Memory().export(resource_id=LEGACY)) == stable(current)
