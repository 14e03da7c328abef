"""The demo chat page in headless Chromium (Debian's chromium, driven by Playwright) on a live server."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from django.core.management import call_command

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(
    os.environ.get("MEMPROC_TEST_ARTIFACTS", Path(__file__).resolve().parents[2] / "test-artifacts")
)
LAUNCH_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

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
    assert "/admin/login/" in page.url  # the chat page needs a login
    page.fill("#id_username", "admin")
    page.fill("#id_password", "memproc-demo")
    page.click("input[type=submit]")
    page.wait_for_url(f"{base}/")


def send(page, text: str) -> None:
    count = page.locator("#messages li.assistant").count()
    page.fill("#input", text)
    page.click("#send")
    page.wait_for_function(
        "n => document.querySelectorAll('#messages li.assistant:not(.pending)').length > n "
        "|| !document.getElementById('banner').hidden",
        arg=count,
    )


def test_chat_streams_remembers_and_shows_blocked_turns(page, live_server):
    base = live_server.url
    login(page, base)
    page.select_option("#agent", "assistant")
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
    page.wait_for_function("document.querySelectorAll('#messages li').length >= 6")
    assert page.locator("#messages li.user").all_inner_texts() == [
        "hello there",
        "how are you today",
        "tell me about memory",
    ]

    send(page, "my name is Ada")
    page.wait_for_function("document.getElementById('working-memory').textContent.includes('Ada')")
    assert re.search(r"Name\*\*: Ada", page.inner_text("#working-memory"))
    page.screenshot(path=str(ARTIFACTS / "chat-working-memory.png"), full_page=True)

    page.select_option("#agent", "guarded")
    send(page, "I really like pineapple on pizza")
    banner = page.locator("#banner")
    assert banner.is_visible() and "block-word" in banner.inner_text()
    assert "pineapple" in banner.inner_text().lower()
    page.screenshot(path=str(ARTIFACTS / "chat-blocked.png"), full_page=True)
    assert "pineapple" not in " ".join(page.locator("#messages li").all_inner_texts())

    page.reload()
    page.wait_for_function("document.querySelectorAll('#messages li').length >= 8")
    assert "pineapple" not in page.inner_text("#messages")


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
        page.select_option("#agent", "flaky")
        send(page, "are you there?")
        banner = page.locator("#banner")
        # memproc's words only: what the provider said stays in the server log
        assert "model provider is unavailable" in banner.inner_text() and not Message.objects.exists()
        assert "provider down" not in banner.inner_text()
        page.screenshot(path=str(ARTIFACTS / "chat-error.png"), full_page=True)
        banner.locator("button").click()
        page.wait_for_function("document.getElementById('banner').hidden")
        # Not the streaming placeholder: the list reloaded from the server after the turn committed.
        page.wait_for_function(
            "document.querySelectorAll('#messages li.assistant:not(.pending)').length == 1"
        )
        assert page.locator("#messages li.assistant").inner_text() == "Back again"
        assert Message.objects.count() == 2
    finally:
        unregister("flaky")
