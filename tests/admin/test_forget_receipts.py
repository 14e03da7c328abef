"""Forget receipts in the admin: listed with what went, verified, held working memory decided only
by staff allowed to change receipts."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.urls import reverse

from memproc.models import ForgetReceipt, Resource, WorkingMemoryRevision
from memproc.services.working_memory import working_memory_update

pytestmark = pytest.mark.django_db
R = "user-7"
CHANGELIST = "admin:memproc_forgetreceipt_changelist"


@pytest.fixture
def held():
    """A receipt holding a working-memory change that a later one built on."""
    for version, value in enumerate(["Ada, code azure falcon", "Ada Lovelace, code azure falcon"], 1):
        working_memory_update(
            scope="resource", key=R, value=value, source="model", replace=True, message_ids=[f"k{version}"]
        )
    return ForgetReceipt.objects.create(
        resource_id=R,
        scope="messages",
        salt="00",
        status=ForgetReceipt.Status.REVIEW,
        held=[{"scope": "resource", "key": R, "from_version": 1}],
        counts={"messages": 1},
    )


def staff(client, *perms: str):
    user = get_user_model().objects.create_user("operator", password="pw", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=perms))
    client.force_login(user)
    return client


def act(client, action: str, receipt: ForgetReceipt):
    return client.post(reverse(CHANGELIST), {"action": action, "_selected_action": [str(receipt.pk)]})


def test_the_list_shows_what_went(admin_client, held):
    page = admin_client.get(reverse(CHANGELIST)).content.decode()
    assert R in page and "1 messages" in page and "Working memory held for review" in page
    assert admin_client.get(reverse("admin:memproc_forgetreceipt_add")).status_code == 403


def test_taking_back_held_memory_from_the_admin(admin_client, held):
    response = act(admin_client, "take_back_held", held)
    assert response.status_code == 302
    held.refresh_from_db()
    assert (held.status, held.held) == ("done", [])
    assert Resource.objects.get(pk=R).working_memory == ""
    assert not WorkingMemoryRevision.objects.filter(new__contains="azure").exists()
    act(admin_client, "verify_resources", held)
    held.refresh_from_db()
    assert held.verified_at is not None


def test_keeping_the_current_value(admin_client, held):
    act(admin_client, "keep_current", held)
    assert Resource.objects.get(pk=R).working_memory == "Ada Lovelace, code azure falcon"
    assert list(WorkingMemoryRevision.objects.values_list("source", flat=True)) == ["forget"]


def test_staff_who_may_only_view_cannot_decide(client, held):
    viewer = staff(client, "view_forgetreceipt")
    assert viewer.get(reverse(CHANGELIST)).status_code == 200
    act(viewer, "take_back_held", held)
    held.refresh_from_db()
    assert held.status == "review" and Resource.objects.get(pk=R).working_memory.startswith("Ada Lovelace")
