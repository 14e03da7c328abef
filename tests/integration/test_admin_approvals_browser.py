"""The admin's approval queue in headless Chromium on a live server: a staff user who may decide opens the
queue from the admin index, approves one call and rejects another with the changelist's actions and
sees their states change (the approved tool ran once, the rejected call is stored as a tool result
saying so); a staff user who may not decide a call does not see it."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission

from memproc import Agent, Memory, models, tool
from memproc.agents import register, unregister
from memproc.llm.types import ModelResponse, ToolCall
from memproc.testing import ScriptedModel
from tests.browser import CHROMIUM, LAUNCH_ARGS
from tests.integration.test_chat_component import ARTIFACTS, eventually

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

AGENT = "admin-approvals-test"
QUEUE = "/admin/memproc/pendingtoolcall/"
RUNS: list[str] = []


@tool(requires_approval=True)
def refund(order: str) -> str:
    """Refunds an order."""
    RUNS.append(order)
    return f"refunded {order}"


@tool(requires_approval="auth.delete_user")
def remove_account(name: str) -> str:
    """Removes an account."""
    RUNS.append(name)
    return "removed"


@pytest.fixture
def agent():
    RUNS.clear()
    model = ScriptedModel()
    agent = register(
        Agent(id=AGENT, model=model, memory=Memory(last_messages=10), tools=[refund, remove_account]),
        replace=True,
    )
    yield agent
    unregister(AGENT)


def suspend(agent, thread: str, name: str, args: dict) -> models.PendingToolCall:
    """A turn on `thread` that stops at a call of `name`, waiting for a decision."""
    agent.model.add(
        ModelResponse(tool_calls=[ToolCall("call-" + thread, name, args)], finish_reason="tool_calls")
    )
    pending = agent.generate("Please", thread_id=thread, resource_id="customer").pending
    return models.PendingToolCall.objects.get(pk=pending.id)


def staff(username: str, *perms: str):
    user = get_user_model().objects.create_user(username, password="pw", is_staff=True)
    for perm in perms:
        app, codename = perm.split(".")
        user.user_permissions.add(Permission.objects.get(content_type__app_label=app, codename=codename))
    return user


@pytest.fixture
def browser(live_server, monkeypatch):
    from playwright.sync_api import sync_playwright

    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # ORM set-up under Playwright's event loop
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        yield browser
        browser.close()
        from django.db import connections

        connections.close_all()


def admin_page(browser, live_server, username: str):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.set_default_timeout(15000)
    page.goto(f"{live_server.url}/admin/login/?next=/admin/")
    page.fill("#id_username", username)
    page.fill("#id_password", "pw")
    page.click("input[type=submit]")
    page.wait_for_url(f"{live_server.url}/admin/")
    return page


def row(page, thread: str):
    return page.locator("#result_list tbody tr", has_text=thread)


def decide(page, thread: str, action: str) -> str:
    """Selects the call of `thread`, runs `action` from the changelist and answers the message shown."""
    row(page, thread).locator("input.action-select").check()
    page.select_option("select[name=action]", action)
    page.click("button[name=index]")
    page.wait_for_selector(".messagelist")
    return page.inner_text(".messagelist")


def stored(thread: str) -> list[tuple[str, str]]:
    rows = []
    for message in models.Message.objects.filter(thread__public_id=thread).order_by("sequence"):
        results = [
            str(p.get("result")) for p in message.content.get("parts", []) if p["type"] == "tool-result"
        ]
        rows.append((message.role, results[0] if results else message.text))
    return rows


def test_a_decider_approves_one_call_and_rejects_another_in_the_queue(browser, live_server, agent):
    approved = suspend(agent, "t-approve", "refund", {"order": "A-1"})
    rejected = suspend(agent, "t-reject", "refund", {"order": "B-2"})
    hidden = suspend(agent, "t-hidden", "remove_account", {"name": "ada"})
    agent.model.add("Order A-1 is refunded.", "I did not refund B-2.")
    staff("decider", "memproc.change_pendingtoolcall")
    page = admin_page(browser, live_server, "decider")

    page.click("a:text-is('Pending tool calls')")
    page.wait_for_url(f"{live_server.url}{QUEUE}")
    assert row(page, "t-approve").count() == 1 and row(page, "t-reject").count() == 1
    assert "refund" in row(page, "t-approve").inner_text() and "A-1" in row(page, "t-approve").inner_text()
    assert row(page, "t-hidden").count() == 0  # another permission decides remove_account
    page.screenshot(path=str(ARTIFACTS / "admin-approval-queue.png"), full_page=True)

    assert "1 call approved; its turn resumed." in decide(page, "t-approve", "approve_selected")
    assert "Done" in row(page, "t-approve").inner_text()
    assert RUNS == ["A-1"]
    approved.refresh_from_db()
    assert approved.state == "done" and approved.decided_by.username == "decider"
    assert eventually(lambda: stored("t-approve")) == [
        ("user", "Please"),
        ("assistant", ""),
        ("tool", "refunded A-1"),
        ("assistant", "Order A-1 is refunded."),
    ]

    assert "1 call rejected; its turn resumed." in decide(page, "t-reject", "reject_selected")
    assert "Rejected" in row(page, "t-reject").inner_text()
    assert "Done" in row(page, "t-approve").inner_text()
    assert RUNS == ["A-1"]  # the approved tool ran once; the rejected one never
    rejected.refresh_from_db()
    assert rejected.state == "rejected" and rejected.reason == "Rejected in the admin"
    assert eventually(lambda: stored("t-reject")) == [
        ("user", "Please"),
        ("assistant", ""),
        ("tool", "The call was rejected and did not run: Rejected in the admin"),
        ("assistant", "I did not refund B-2."),
    ]

    # The rejected call's page says what the model read instead of a result.
    row(page, "t-reject").locator("th a, td a").first.click()
    page.wait_for_selector(".field-result_json")
    assert "rejected and did not run" in page.inner_text(".field-result_json")
    hidden.refresh_from_db()
    assert hidden.state == "pending"


def test_staff_without_the_permission_do_not_see_the_call(browser, live_server, agent):
    suspend(agent, "t-waiting", "refund", {"order": "A-1"})
    staff("plain")
    page = admin_page(browser, live_server, "plain")
    assert page.locator("a:text-is('Pending tool calls')").count() == 0

    response = page.goto(f"{live_server.url}{QUEUE}")
    assert response.status == 403
    assert "t-waiting" not in page.content()
    assert RUNS == [] and models.PendingToolCall.objects.get().state == "pending"
