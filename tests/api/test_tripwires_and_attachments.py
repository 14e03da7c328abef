"""Tripwire logs (staff with the admin's permissions: list, filters, review) and attachment metadata
(owner, or staff with `memproc.view_thread`)."""

from __future__ import annotations

import hashlib
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.core.files.base import ContentFile
from django.utils import timezone

from memproc import models
from tests.api.conftest import API, client_for
from tests.factories import MessageFactory, TripwireLogFactory, UserFactory

pytestmark = pytest.mark.django_db

TRIPWIRES = API + "tripwires/"


def staff_with(*codenames: str):
    user = UserFactory(is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="memproc", codename__in=codenames)
    )
    return user


@pytest.fixture
def staff(db):
    """The review queue's operator: staff with the admin's permission to read and review it."""
    return staff_with("view_tripwirelog", "change_tripwirelog")


@pytest.fixture
def logs():
    now = timezone.now()
    return {
        "old": TripwireLogFactory(agent_id="support", processor_id="pii", created_at=now - timedelta(days=3)),
        "new": TripwireLogFactory(agent_id="support", processor_id="max-length", created_at=now),
        "sales": TripwireLogFactory(
            agent_id="sales", processor_id="pii", status="confirmed", created_at=now - timedelta(days=1)
        ),
    }


def listed(client, **params) -> list[str]:
    response = client.get(TRIPWIRES, params)
    assert response.status_code == 200, response.content
    return [row["id"] for row in response.json()["results"]]


def test_tripwires_are_staff_only(api_client, owner_client, logs):
    assert api_client.get(TRIPWIRES).status_code in (401, 403)
    assert owner_client.get(TRIPWIRES).status_code == 403
    log_url = f"{TRIPWIRES}{logs['new'].pk}/review/"
    assert owner_client.post(log_url, {"status": "confirmed"}, format="json").status_code == 403


def test_staff_without_the_model_permissions_are_refused_as_in_the_admin(logs):
    """Staff without `view_tripwirelog` get the admin's 403, not a list scoped to their own resources:
    the queue holds other owners' blocked input."""
    bare = client_for(staff_with())
    log_url = f"{TRIPWIRES}{logs['new'].pk}/"
    assert bare.get(TRIPWIRES).status_code == 403
    assert bare.get(log_url).status_code == 403
    assert bare.post(f"{log_url}review/", {"status": "confirmed"}, format="json").status_code == 403
    viewer = client_for(staff_with("view_tripwirelog"))
    assert viewer.get(TRIPWIRES).status_code == 200
    assert viewer.get(log_url).status_code == 200
    assert viewer.post(f"{log_url}review/", {"status": "confirmed"}, format="json").status_code == 403
    logs["new"].refresh_from_db()
    assert logs["new"].status == "pending" and logs["new"].reviewed_by is None


def test_staff_list_newest_first_with_every_field(staff_client, logs):
    response = staff_client.get(TRIPWIRES)
    rows = response.json()["results"]
    assert [r["id"] for r in rows] == [str(logs[k].pk) for k in ("new", "sales", "old")]
    assert set(rows[0]) == {
        "id",
        "agent_id",
        "processor_id",
        "phase",
        "reason",
        "retry",
        "metadata",
        "thread_id",
        "resource_id",
        "content",
        "status",
        "reviewed_by",
        "reviewed_at",
        "note",
        "created_at",
    }


def test_tripwire_filters(staff_client, logs):
    ids = {k: str(v.pk) for k, v in logs.items()}
    assert listed(staff_client, status="confirmed") == [ids["sales"]]
    assert listed(staff_client, agent="support") == [ids["new"], ids["old"]]
    assert listed(staff_client, processor="pii") == [ids["sales"], ids["old"]]
    after = (timezone.now() - timedelta(days=2)).isoformat()
    assert listed(staff_client, created_after=after) == [ids["new"], ids["sales"]]
    assert listed(staff_client, created_before=after) == [ids["old"]]
    assert listed(staff_client, agent="support", processor="pii") == [ids["old"]]


def test_bad_filter_values_are_a_400(staff_client, logs):
    assert staff_client.get(TRIPWIRES, {"status": "maybe"}).status_code == 400
    assert staff_client.get(TRIPWIRES, {"created_after": "yesterday"}).status_code == 400


def test_tripwire_list_is_cursor_paginated(staff_client, logs):
    first = staff_client.get(TRIPWIRES, {"limit": 2}).json()
    second = staff_client.get(first["next"]).json()
    assert len(first["results"]) == 2 and len(second["results"]) == 1


def test_review_records_status_reviewer_and_note(staff_client, staff, logs):
    log = logs["new"]
    response = staff_client.post(
        f"{TRIPWIRES}{log.pk}/review/", {"status": "false_positive", "note": "fine"}, format="json"
    )
    assert response.status_code == 200
    body = response.json()
    assert (body["status"], body["note"], body["reviewed_by"]) == (
        "false_positive",
        "fine",
        staff.get_username(),
    )
    assert body["reviewed_at"]
    log.refresh_from_db()
    assert (log.status, log.reviewed_by) == ("false_positive", staff)
    reopened = staff_client.post(f"{TRIPWIRES}{log.pk}/review/", {"status": "pending"}, format="json").json()
    assert (reopened["status"], reopened["reviewed_at"]) == ("pending", None)


def test_review_validates(staff_client, logs):
    response = staff_client.post(f"{TRIPWIRES}{logs['new'].pk}/review/", {"status": "ignored"}, format="json")
    assert response.status_code == 400 and set(response.json()) == {"status"}


def test_unknown_tripwire_is_a_404(staff_client):
    assert staff_client.get(f"{TRIPWIRES}not-a-uuid/").status_code == 404
    missing = "00000000-0000-0000-0000-000000000000"
    assert (
        staff_client.post(f"{TRIPWIRES}{missing}/review/", {"status": "pending"}, format="json").status_code
        == 404
    )


# --- attachments -------------------------------------------------------------------------------------


def make_attachment(resource_id: str, *, message=None, data: bytes = b"hello") -> models.Attachment:
    attachment = models.Attachment(
        resource_id=resource_id,
        message=message,
        name="note.txt",
        content_type="text/plain",
        size=len(data),
        sha256=hashlib.sha256(data + resource_id.encode()).hexdigest(),
    )
    attachment.file.save("note.txt", ContentFile(data), save=True)
    return attachment


def test_owner_reads_attachment_metadata_and_url(owner_client, thread):
    message = MessageFactory(thread=thread, sequence=1)
    attachment = make_attachment(thread.resource_id, message=message)
    response = owner_client.get(f"{API}attachments/{attachment.pk}/")
    assert response.status_code == 200
    body = response.json()
    assert body == {
        "id": str(attachment.pk),
        "name": "note.txt",
        "content_type": "text/plain",
        "size": 5,
        "sha256": attachment.sha256,
        "created_at": body["created_at"],
        "thread_id": thread.public_id,
        "url": f"http://testserver{API}attachments/{attachment.pk}/download/",
    }


def test_unattached_file_has_no_thread(owner_client, resource):
    attachment = make_attachment(resource.pk)
    assert owner_client.get(f"{API}attachments/{attachment.pk}/").json()["thread_id"] is None


def test_another_users_attachment_is_a_404_but_staff_with_view_thread_see_it(
    owner_client, api_client, other_resource
):
    attachment = make_attachment(other_resource.pk)
    url = f"{API}attachments/{attachment.pk}/"
    assert owner_client.get(url).status_code == 404
    assert client_for(staff_with("view_thread")).get(url).status_code == 200
    assert client_for(staff_with("view_tripwirelog", "change_tripwirelog")).get(url).status_code == 404
    assert api_client.get(url).status_code in (401, 403)


def test_generate_may_reference_own_attachments_only(owner_client, agent, model, resource, other_resource):
    mine = make_attachment(resource.pk)
    theirs = make_attachment(other_resource.pk, data=b"secret")
    model.add("seen")

    def send(attachment):
        part = {"type": "attachment", "attachment_id": str(attachment.pk), "name": "note.txt"}
        return owner_client.post(
            API + "agents/api-test/generate/",
            {"messages": {"role": "user", "content": [part]}},
            format="json",
        )

    assert send(mine).status_code == 200
    response = send(theirs)
    assert response.status_code == 400 and "Unknown attachment" in response.json()["messages"][0]
    assert model.calls == 1
