"""Operators edit working memory through the service: a revision per change, source admin."""

from __future__ import annotations

import pytest
from django.urls import reverse

from memproc import models
from memproc.services.working_memory import working_memory_update

pytestmark = pytest.mark.django_db


def thread_form(thread: models.Thread, **changes) -> dict:
    data = {
        "title": thread.title,
        "metadata": "{}",
        "working_memory_text": thread.working_memory,
        "working_memory_seen_version": thread.working_memory_version,
    }
    return {**data, **changes}


def test_editing_thread_working_memory_records_an_admin_revision(admin_client, admin_user, conversation):
    thread = conversation.thread
    url = reverse("admin:memproc_thread_change", args=[thread.pk])
    response = admin_client.post(
        url, thread_form(thread, working_memory_text="Order 7 is late.\r\nCall back.", _save="Save")
    )
    assert response.status_code == 302
    thread.refresh_from_db()
    assert thread.working_memory == "Order 7 is late.\nCall back."
    revision = models.WorkingMemoryRevision.objects.filter(scope="thread", key=thread.pk).latest("version")
    assert (revision.source, revision.actor, revision.version) == ("admin", admin_user, 2)
    page = admin_client.get(url).content.decode()
    assert '<span class="memproc-diff-add">+Call back.</span>' in page and "Admin" in page


def test_saving_other_fields_leaves_working_memory_alone(admin_client, conversation):
    thread = conversation.thread
    url = reverse("admin:memproc_thread_change", args=[thread.pk])
    before = models.WorkingMemoryRevision.objects.count()
    data = thread_form(thread, title="Renamed", working_memory_text="Order 7 is late.\r\n")
    assert admin_client.post(url, data).status_code == 302
    thread.refresh_from_db()
    assert thread.title == "Renamed" and thread.working_memory == "Order 7 is late."
    assert models.WorkingMemoryRevision.objects.count() == before


def test_a_concurrent_change_is_not_overwritten(admin_client, conversation):
    thread = conversation.thread
    stale = thread_form(thread, working_memory_text="Operator's version")
    working_memory_update(scope="thread", key=thread.pk, value="The model's newer version", source="model")
    response = admin_client.post(reverse("admin:memproc_thread_change", args=[thread.pk]), stale)
    assert response.status_code == 200 and "changed since this page was opened" in response.content.decode()
    thread.refresh_from_db()
    assert thread.working_memory == "The model's newer version"


def test_editing_resource_working_memory(admin_client, admin_user, conversation):
    resource = models.Resource.objects.get(pk="user-42")
    url = reverse("admin:memproc_resource_change", args=[resource.pk])
    data = {
        "metadata": '{"plan": "pro"}',
        "working_memory_text": "# User\n- Name: Ada Lovelace\n",
        "working_memory_seen_version": resource.working_memory_version,
    }
    assert admin_client.post(url, data).status_code == 302
    resource.refresh_from_db()
    assert resource.metadata == {"plan": "pro"} and "Ada Lovelace" in resource.working_memory
    latest = models.WorkingMemoryRevision.objects.filter(scope="resource", key=resource.pk).latest("version")
    assert latest.source == "admin" and latest.actor == admin_user and "Lisbon" in latest.old


def test_schema_mode_memory_must_stay_json(admin_client, conversation):
    thread = conversation.thread
    working_memory_update(scope="thread", key=thread.pk, value={"name": "Ada"}, source="model", mode="schema")
    thread.refresh_from_db()
    url = reverse("admin:memproc_thread_change", args=[thread.pk])
    response = admin_client.post(url, thread_form(thread, working_memory_text="name: Ada"))
    assert response.status_code == 200 and "enter a JSON object" in response.content.decode()
    assert (
        admin_client.post(url, thread_form(thread, working_memory_text='{"name": "Ada L."}')).status_code
        == 302
    )


def test_a_users_correction_reads_as_theirs_in_the_revision_admin(admin_client, admin_user):
    """The memory view's corrections: source "User (memory view)", the user as actor; the resource
    page names the fields the user pinned."""
    from memproc.services.memory_view import resource_field_pin

    working_memory_update(
        scope="resource",
        key="user-7",
        field="Location",
        value="Oslo",
        source=models.WorkingMemoryRevision.Source.USER,
        template="- **Location**:",
        actor=admin_user,
    )
    resource_field_pin(resource_id="user-7", name="Location", pinned=True)
    page = admin_client.get(reverse("admin:memproc_workingmemoryrevision_changelist")).content.decode()
    assert "User (memory view)" in page and admin_user.get_username() in page
    filtered = admin_client.get(
        reverse("admin:memproc_workingmemoryrevision_changelist") + "?source__exact=user"
    )
    assert filtered.status_code == 200 and "User (memory view)" in filtered.content.decode()
    resource_page = admin_client.get(
        reverse("admin:memproc_resource_change", args=["user-7"])
    ).content.decode()
    assert "Pinned fields" in resource_page and "Location" in resource_page
