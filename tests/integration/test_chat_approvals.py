"""Tool approvals in the `<memproc-chat>` component, in headless Chromium on a live server: a turn that
stops at an approval-gated tool shows the call; a user who may decide approves it (the tool runs once
and the answer shows) or rejects it with a reason (the model's reply to the rejection shows); a user
who may not sees that it waits and no buttons; of two tabs deciding, the second is told it was already
decided."""

from __future__ import annotations

import os
import threading

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client

from memproc import Agent, Memory, models, tool
from memproc.agents import register, unregister
from memproc.llm.types import ModelResponse, ToolCall
from memproc.testing import ScriptedModel
from tests.browser import CHROMIUM, LAUNCH_ARGS
from tests.integration.test_chat_component import ARTIFACTS, eventually, login, send

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

AGENT = "approvals-test"
WIDGET = f"/widget/?agent={AGENT}"
RUNS: list[str] = []
CHAT = "document.querySelector('memproc-chat').shadowRoot"


@tool(requires_approval=True)
def refund(order: str) -> str:
    """Refunds an order."""
    RUNS.append(order)
    return f"refunded {order}"


def refund_call(order: str = "A-17") -> ModelResponse:
    return ModelResponse(
        text="I will refund it once approved.",
        tool_calls=[ToolCall("call-1", "refund", {"order": order})],
        finish_reason="tool_calls",
    )


@pytest.fixture
def model():
    RUNS.clear()
    model = ScriptedModel()
    register(Agent(id=AGENT, model=model, memory=Memory(last_messages=10), tools=[refund]), replace=True)
    yield model
    unregister(AGENT)


@pytest.fixture
def gate():
    """Holds a model answer until the test opens it (always opened at the end: no server thread hangs)."""
    gate = threading.Event()
    yield gate
    gate.set()


def held(gate: threading.Event, text: str):
    """A scripted answer that waits for `gate`, so the test sees the decision in flight."""

    def answer(request):
        if not gate.wait(10):
            raise AssertionError("the test never opened the gate")
        return text

    return answer


@pytest.fixture
def browser(live_server, monkeypatch):
    from playwright.sync_api import sync_playwright

    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # ORM set-up under Playwright's event loop
    call_command("demo_setup", stdout=open(os.devnull, "w"))
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        yield browser
        browser.close()
        from django.db import connections

        connections.close_all()


def new_page(context):
    page = context.new_page()
    page.set_viewport_size({"width": 1100, "height": 900})
    page.set_default_timeout(15000)
    return page


@pytest.fixture
def page(browser):
    """A page of the demo admin, a superuser: the permission to decide every call."""
    return new_page(browser.new_context())


def signed_in_page(browser, live_server, user):
    """A page whose session is `user`'s (no admin login needed: the widget page wants any user)."""
    client = Client()
    client.force_login(user)
    context = browser.new_context()
    context.add_cookies(
        [{"name": "sessionid", "value": client.cookies["sessionid"].value, "url": live_server.url}]
    )
    return new_page(context)


def card(page):
    return page.locator("memproc-chat .approval")


def stored(thread_id: str) -> list[tuple[str, str]]:
    """(role, text or tool result) of the thread's stored messages, in order."""
    rows = []
    for message in models.Message.objects.filter(thread__public_id=thread_id).order_by("sequence"):
        results = [
            str(p.get("result")) for p in message.content.get("parts", []) if p["type"] == "tool-result"
        ]
        rows.append((message.role, results[0] if results else message.text))
    return rows


def thread_of(page) -> str:
    return page.evaluate(f"localStorage.getItem('memproc-chat:{AGENT}')")


def test_a_user_who_may_decide_approves_and_sees_the_answer(page, live_server, model, gate):
    model.add(refund_call(), held(gate, "Order A-17 is refunded."))
    login(page, live_server.url, WIDGET)
    send(page, "Please refund order A-17")

    approval = card(page)
    approval.locator("button.approve").wait_for()
    assert approval.locator(".approval-tool").inner_text() == "refund"
    assert '"order": "A-17"' in approval.locator(".approval-args").inner_text()
    assert "I will refund it once approved." in page.locator("memproc-chat .message.assistant").inner_text()
    assert approval.get_attribute("aria-label") == "Tool call waiting for approval: refund"
    assert approval.locator("button.approve").get_attribute("aria-label") == "Approve refund"
    assert RUNS == [] and not models.Message.objects.exists()
    assert approval.get_by_label("Reason for rejecting refund").is_hidden()
    assert page.locator("memproc-chat .message.assistant .tool").is_hidden()  # the card shows the call
    page.screenshot(path=str(ARTIFACTS / "component-approval.png"), full_page=True)

    # While the decision is in flight its buttons are disabled.
    approval.locator("button.approve").click()
    approval.locator("text=Approving…").wait_for()
    assert (
        approval.locator("button.approve").is_disabled() and approval.locator("button.reject").is_disabled()
    )
    assert approval.get_attribute("aria-busy") == "true"
    gate.set()
    answer = page.locator("memproc-chat .message.assistant")
    answer.locator("text=Order A-17 is refunded.").wait_for()
    assert card(page).count() == 0
    assert "refund" in answer.locator(".tool").inner_text() and "refunded A-17" in answer.inner_text()

    thread_id = thread_of(page)
    assert RUNS == ["A-17"]
    assert models.PendingToolCall.objects.get().state == "done"
    assert eventually(lambda: stored(thread_id)) == [
        ("user", "Please refund order A-17"),
        ("assistant", "I will refund it once approved."),
        ("tool", "refunded A-17"),
        ("assistant", "Order A-17 is refunded."),
    ]
    # The saved turn is the conversation a reload shows: the same messages, no call waiting.
    page.reload()
    page.wait_for_function(f"{CHAT}.querySelectorAll('.message').length === 2")
    assert card(page).count() == 0
    assert "Order A-17 is refunded." in page.locator("memproc-chat .message.assistant").inner_text()


def test_a_rejection_with_a_reason_shows_the_models_reply_to_it(page, live_server, model):
    model.add(refund_call(), "Understood, I did not refund it.")
    login(page, live_server.url, WIDGET)
    send(page, "Please refund order A-17")

    approval = card(page)
    reason = approval.get_by_label("Reason for rejecting refund")
    approval.locator("button.reject").wait_for()
    assert reason.is_hidden() and approval.locator("button.reject").get_attribute("aria-expanded") == "false"
    approval.locator("button.reject").click()
    reason.wait_for()
    assert approval.locator("button.reject").get_attribute("aria-expanded") == "true"
    reason.fill("That order was already refunded")
    approval.get_by_role("button", name="Send the rejection of refund").click()
    answer = page.locator("memproc-chat .message.assistant")
    answer.locator("text=Understood, I did not refund it.").wait_for()
    assert "rejected" in answer.locator(".tool.error").inner_text()

    thread_id = thread_of(page)
    rejection = "The call was rejected and did not run: That order was already refunded"
    assert RUNS == []
    row = models.PendingToolCall.objects.get()
    assert row.state == "rejected" and row.reason == "That order was already refunded"
    assert eventually(lambda: stored(thread_id)) == [
        ("user", "Please refund order A-17"),
        ("assistant", "I will refund it once approved."),
        ("tool", rejection),
        ("assistant", "Understood, I did not refund it."),
    ]
    assert rejection in [r.result for m in model.requests[-1].messages for r in m.tool_results]


def test_a_user_who_may_not_decide_sees_that_the_turn_waits_and_no_buttons(browser, live_server, model):
    model.add(refund_call())
    user = get_user_model().objects.create_user("customer", password="pw")
    page = signed_in_page(browser, live_server, user)
    page.goto(live_server.url + WIDGET)
    send(page, "Please refund order A-17")

    approval = card(page)
    approval.locator("text=Waiting for approval.").wait_for()
    assert approval.locator(".approval-tool").inner_text() == "refund"
    assert '"order": "A-17"' in approval.locator(".approval-args").inner_text()
    assert approval.locator("button").count() == 0
    assert page.locator("memproc-chat .banner").is_hidden()
    row = models.PendingToolCall.objects.get()
    assert row.state == "pending" and row.resource_id == str(user.pk) and RUNS == []


def test_of_two_tabs_deciding_the_second_is_told_it_was_already_decided(page, live_server, model):
    model.add("Hello.", refund_call(), "Order A-17 is refunded.")
    login(page, live_server.url, WIDGET)
    send(page, "Hi")
    page.wait_for_function(f"{CHAT}.querySelectorAll('.message.assistant:not(.pending)').length === 1")
    send(page, "Please refund order A-17")
    card(page).locator("button.approve").wait_for()

    # The same conversation in a second tab: the call waits there too, with its buttons.
    other = new_page(page.context)
    other.goto(live_server.url + WIDGET)
    card(other).locator("button.approve").wait_for()
    assert (
        "I will refund it once approved."
        in other.locator("memproc-chat .message.assistant").last.inner_text()
    )

    other.bring_to_front()
    card(other).locator("button.approve").click()
    other.locator("memproc-chat .message.assistant").last.locator("text=Order A-17 is refunded.").wait_for()

    page.bring_to_front()
    approval = card(page)
    approval.locator("button.approve").click()
    approval.locator("text=Already decided by someone else").wait_for()
    assert approval.locator("button").count() == 0
    assert RUNS == ["A-17"]
    assert models.PendingToolCall.objects.get().state == "done"
    assert [role for role, _ in eventually(lambda: stored(thread_of(page)))] == [
        "user",
        "assistant",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
