"""A real browser opens a transcript in the admin of a live server, unfolds "Why the model saw this"
under a reply, follows it into the transcript, and photographs the panel for the docs.

Headless Chromium from Debian's `chromium` package, driven by Playwright's Python package (never
`playwright install`). The screenshot goes to $MEMPROC_SCREENSHOTS (docs/screenshots/ when refreshing the README's).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from urllib.parse import urlencode

import pytest
from django.contrib.admin.utils import quote
from django.db import connections
from django.urls import reverse

from tests.admin.test_browser import CHROMIUM, CHROMIUM_ARGS
from tests.admin.turn_data import make_turns

# docs/screenshots/ only when asked (MEMPROC_SCREENSHOTS=docs/screenshots): a plain run changes no tracked file.
SCREENSHOT = (
    Path(os.environ.get("MEMPROC_SCREENSHOTS", Path(tempfile.gettempdir()) / "memproc-screenshots"))
    / "admin-why-the-model-saw-this.png"
)

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not shutil.which(CHROMIUM), reason="needs Debian's chromium at /usr/bin/chromium"),
]


@pytest.fixture
def page(monkeypatch):
    sync_api = pytest.importorskip("playwright.sync_api")
    # Playwright's sync API runs an event loop in this thread; the test's own ORM calls are still sync.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser.new_page(viewport={"width": 1280, "height": 900}, device_scale_factor=1)
        finally:
            browser.close()
            connections.close_all()  # or PostgreSQL refuses to drop the test database


def test_operator_unfolds_why_the_model_saw_a_reply(live_server, admin_user, page):
    data = make_turns()
    thread_page = reverse("admin:memproc_thread_change", args=[quote(data.thread.pk)])  # under its key
    page.goto(f"{live_server.url}/admin/login/?{urlencode({'next': thread_page})}")
    page.fill("#id_username", admin_user.get_username())
    page.fill("#id_password", "password")
    page.click("input[type=submit]")
    page.wait_for_selector(".memproc-message")
    page.click("#toggle-nav-sidebar")  # the transcript gets the whole width

    panels = page.locator("details.memproc-why")
    assert panels.count() == len(data.records) == 4  # one under each reply
    panel = page.locator(f"#turn-{data.last.pk}")
    assert not panel.evaluate("details => details.open")
    panel.locator("summary").click()
    assert panel.evaluate("details => details.open")
    body = panel.locator(".memproc-why-body")
    body.wait_for(state="visible")
    text = body.inner_text()
    assert "The island ferry it is, then." in text  # recalled from the other thread
    assert "last-summer" in text and "this thread" in text
    tokens = data.last.manifest["tokens"]
    assert "version 1" in text and f"{tokens['total']} of {tokens['limit']}" in text
    assert "semantic-recall" in text and "test/scripted" in text

    # A history chip is a link into this transcript.
    history = panel.locator(".memproc-refs a.memproc-ref-here").first
    target = history.get_attribute("href")
    assert target.startswith("#message-")

    message = page.locator(f"#message-{data.last.message_ids[-1]}")
    message.scroll_into_view_if_needed()
    box = message.bounding_box()
    page.set_viewport_size({"width": 1280, "height": max(900, int(box["height"]) + 140)})
    message.scroll_into_view_if_needed()
    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    question = page.locator(f"#message-{data.last.message_ids[0]}")
    page.screenshot(path=str(SCREENSHOT), clip=_around(question.bounding_box(), message.bounding_box(), page))

    history.click()
    assert page.evaluate("() => location.hash") == target


def _around(question: dict, reply: dict, page) -> dict:
    """The question, the reply and its open panel, as a clip rectangle."""
    left = page.locator("#transcript").bounding_box()["x"]
    top = max(0, question["y"] - 6)
    right = reply["x"] + reply["width"] + 12
    return {"x": left, "y": top, "width": right - left, "height": reply["y"] + reply["height"] + 14 - top}
