"""The demo chat page in headless Chromium (Debian's chromium, driven by Playwright) on a live server."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from django.core.management import call_command

from tests.browser import CHROMIUM, LAUNCH_ARGS

ARTIFACTS = Path(
    os.environ.get("MEMPROC_TEST_ARTIFACTS", Path(__file__).resolve().parents[2] / "test-artifacts")
)

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
]


@pytest.fixture
def page(live_server, monkeypatch):
    from playwright.sync_api import sync_playwright

    # Playwright's sync API runs an event loop in this thread; the ORM calls here are test set-up.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    call_command("demo_setup", stdout=open(os.devnull, "w"))
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.set_default_timeout(15000)
        yield page
        browser.close()
        from django.db import connections

        connections.close_all()  # ORM calls under Playwright's loop opened a second connection


def login(page, base: str) -> None:
    page.goto(f"{base}/")
    page.click("#sign-in")  # the landing page says why the chat needs a login
    assert "/login/" in page.url and "/admin/" not in page.url  # the demo's own sign-in page
    page.fill("#id_username", "admin")
    page.fill("#id_password", "memproc-demo")
    page.click("button[type=submit]")
    # the page then adds ?agent=… to its address (history.replaceState): either form is the landing page
    page.wait_for_url(re.compile(re.escape(base) + r"/(\?.*)?$"))
    page.wait_for_selector("body[data-ready=true]", state="attached")


def choose_agent(page, agent_id: str) -> None:
    page.select_option("#agent", agent_id)  # each agent has its own threads: this opens its newest
    page.wait_for_selector("body[data-ready=true]", state="attached")


def send(page, text: str) -> None:
    count = page.locator("#messages li.assistant").count()
    page.fill("#input", text)
    page.click("#send")
    page.wait_for_function(  # the reply is in, or a banner says why not; the memory panel is loaded
        "n => (document.querySelectorAll('#messages li.assistant:not(.pending)').length > n "
        "|| !document.getElementById('banner').hidden) && !document.getElementById('send').disabled",
        arg=count,
    )


def test_chat_streams_remembers_and_shows_blocked_turns(page, live_server):
    base = live_server.url
    login(page, base)
    choose_agent(page, "assistant")
    for text in ("hello there", "how are you today", "tell me about memory"):
        send(page, text)
    replies = page.locator("#messages li.assistant").all_inner_texts()
    assert [r.split(" [")[0] for r in replies] == [
        "Echo: hello there",
        "Echo: how are you today",
        "Echo: tell me about memory",
    ]
    assert page.locator("#history li").count() == 4  # the window the model saw on the third turn
    page.screenshot(path=str(ARTIFACTS / "chat-three-turns.png"), full_page=True)

    page.reload()
    page.wait_for_selector("body[data-ready=true]", state="attached")
    assert page.locator("#messages li").count() == 6
    assert page.locator("#messages li.user").all_inner_texts() == [
        "hello there",
        "how are you today",
        "tell me about memory",
    ]

    send(page, "my name is Ada")
    page.wait_for_function("document.getElementById('working-memory').textContent.includes('Ada')")
    assert re.search(r"Name\*\*: Ada", page.inner_text("#working-memory"))
    page.screenshot(path=str(ARTIFACTS / "chat-working-memory.png"), full_page=True)

    choose_agent(page, "guarded")
    assert page.locator("#messages li").count() == 0  # the assistant's thread is not continued
    send(page, "My card is 4111 1111 1111 1111")
    banner = page.locator("#banner")
    assert banner.is_visible() and "pii-detector" in banner.inner_text()
    assert "Personal data detected" in banner.inner_text()
    page.screenshot(path=str(ARTIFACTS / "chat-blocked.png"), full_page=True)
    assert "not saved" in page.inner_text("#messages li.user.unsaved")

    page.reload()
    page.wait_for_selector("body[data-ready=true]", state="attached")
    assert "4111" not in page.inner_text("#messages")
    choose_agent(page, "assistant")
    assert page.locator("#messages li").count() == 8
    assert "4111" not in page.inner_text("#messages")


def test_model_failure_shows_a_retryable_error_and_saves_nothing(page, live_server, settings):
    from memproc import Agent, Memory
    from memproc.agents import register, unregister
    from memproc.exceptions import ModelUnavailableError
    from memproc.models import Message
    from memproc.testing import ScriptedModel

    model = ScriptedModel([ModelUnavailableError("provider down"), "Back again"])
    register(Agent(id="flaky", name="Flaky", model=model, memory=Memory()), replace=True)
    try:
        base = live_server.url
        login(page, base)
        page.reload()
        choose_agent(page, "flaky")
        send(page, "are you there?")
        banner = page.locator("#banner")
        # plain words only: what the provider said stays in the server log
        assert "The AI model is not answering right now" in banner.inner_text()
        assert not Message.objects.exists()
        assert "provider down" not in banner.inner_text()
        page.screenshot(path=str(ARTIFACTS / "chat-error.png"), full_page=True)
        banner.locator("button", has_text="Try again").click()
        page.wait_for_function("document.getElementById('banner').hidden")
        # Not the streaming placeholder: the list reloaded from the server after the turn committed.
        page.wait_for_function(
            "document.querySelectorAll('#messages li.assistant:not(.pending)').length == 1"
        )
        assert page.locator("#messages li.assistant").inner_text() == "Back again"
        assert Message.objects.count() == 2
    finally:
        unregister("flaky")
