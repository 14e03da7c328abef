"""A suspended turn is the owner's data: it travels with an export, comes back with an import, and
goes with its thread when the thread is deleted or forgotten."""

from __future__ import annotations

import pytest

from memproc import Memory
from memproc.exceptions import PendingCallNotFound, ValidationError
from memproc.models import Message, PendingToolCall
from memproc.services import approvals
from memproc.services.export import resource_export, resource_import
from memproc.services.purge import resource_purge
from tests.approvals.conftest import call
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def suspended(approval_agent, model):
    """Thread t1 with one saved turn, then a second turn suspended at the gated tool."""
    model.add("Hello.", call("secret.txt"), "Deleted.")
    approval_agent.generate("Hi", thread_id="t1", resource_id="u1")
    return approval_agent.generate("Delete secret.txt", thread_id="t1", resource_id="u1").pending


def test_the_export_holds_the_suspended_turn_with_its_input(suspended):
    document = resource_export(resource_id="u1")
    (exported,) = document["pending_tool_calls"]
    assert exported["id"] == suspended.id
    assert (exported["state"], exported["kind"], exported["tool_name"]) == (
        "pending",
        "approval",
        "delete_file",
    )
    assert exported["arguments"] == {"path": "secret.txt"}
    assert "Delete secret.txt" in str(exported["turn"])
    assert exported["decided_by"] is None


def test_a_decided_call_names_its_decider_by_username(suspended, deletions):
    user = UserFactory(username="reviewer", is_superuser=True, is_staff=True)
    approvals.reject(suspended.id, actor=user, reason="not this one")
    (exported,) = resource_export(resource_id="u1")["pending_tool_calls"]
    assert (exported["state"], exported["decided_by"], exported["reason"]) == (
        "rejected",
        "reviewer",
        "not this one",
    )
    assert deletions.runs == []


def test_purge_then_import_brings_a_pending_call_back_and_it_can_be_decided(suspended, deletions):
    document = resource_export(resource_id="u1")
    resource_purge(resource_id="u1")
    assert not PendingToolCall.objects.exists()
    report = resource_import(document=document, embed=False)
    assert report.created["pending_tool_calls"] == 1
    assert resource_export(resource_id="u1")["pending_tool_calls"] == document["pending_tool_calls"]
    result = approvals.approve(suspended.id)
    assert deletions.runs == ["secret.txt"] and result.text == "Deleted."
    texts = list(
        Message.objects.filter(thread__public_id="t1").order_by("sequence").values_list("text", flat=True)
    )
    assert texts == ["Hi", "Hello.", "Delete secret.txt", "", "", "Deleted."]


def test_importing_twice_keeps_one_call(suspended):
    document = resource_export(resource_id="u1")
    report = resource_import(document=document, embed=False)
    assert (report.created["pending_tool_calls"], report.existing["pending_tool_calls"]) == (0, 1)
    assert PendingToolCall.objects.count() == 1


@pytest.mark.parametrize(
    ("change", "place"),
    [
        ({"kind": "server"}, "pending_tool_calls[0].kind"),
        ({"state": "maybe"}, "pending_tool_calls[0].state"),
        ({"id": "not-a-uuid"}, "pending_tool_calls[0].id"),
        ({"edited_arguments": [1, 2]}, "pending_tool_calls[0].edited_arguments"),
        ({"turn": "text"}, "pending_tool_calls[0].turn"),
    ],
)
def test_a_bad_pending_call_is_refused_with_its_place_and_nothing_written(suspended, change, place):
    document = resource_export(resource_id="u1")
    resource_purge(resource_id="u1")
    document["pending_tool_calls"][0].update(change)
    with pytest.raises(ValidationError, match=place.replace("[", r"\[").replace("]", r"\]")):
        resource_import(document=document, embed=False)
    assert not PendingToolCall.objects.exists() and not Message.objects.exists()


def test_deleting_the_thread_deletes_its_suspended_turns_only(approval_agent, model, suspended):
    approval_agent.generate("Hi", thread_id="t2", resource_id="u1")  # answered by "Deleted." (unused)
    model.add(call("other.txt"))
    other = approval_agent.generate("Delete other.txt", thread_id="t2", resource_id="u1").pending
    Memory().delete_thread("t1", resource_id="u1")
    assert [str(pk) for pk in PendingToolCall.objects.values_list("pk", flat=True)] == [other.id]


def test_forgetting_the_thread_forgets_its_suspended_turn(suspended, deletions):
    Memory().forget(resource_id="u1", thread_id="t1")
    assert not PendingToolCall.objects.exists()
    with pytest.raises(PendingCallNotFound):
        approvals.approve(suspended.id)
    assert deletions.runs == []
