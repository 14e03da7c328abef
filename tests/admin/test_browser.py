"""A real browser reviews a blocked turn in the admin of a live server, and photographs a transcript.

Headless Chromium from Debian's `chromium` package, driven by Playwright's Python package (never
`playwright install`). The screenshot lands in $MEMPROC_TEST_ARTIFACTS (default: ./test-artifacts).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from django.contrib.admin.utils import quote
from django.db import connections
from django.urls import reverse

from memproc import models

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not shutil.which(CHROMIUM), reason="needs Debian's chromium at /usr/bin/chromium"),
]


def artifacts_dir() -> Path:
    default = Path(__file__).resolve().parents[2] / "test-artifacts"
    path = Path(os.environ.get("MEMPROC_TEST_ARTIFACTS", default))
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture
def browser_page(monkeypatch):
    sync_api = pytest.importorskip("playwright.sync_api")
    # Playwright's sync API runs an event loop in this thread; the test's own ORM calls are still sync.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser.new_page(viewport={"width": 1280, "height": 900})
        finally:
            browser.close()
            # The test's ORM calls inside Playwright's context opened their own connection; close it, or
            # PostgreSQL refuses to drop the test database at the end of the run.
            connections.close_all()


def test_operator_marks_a_blocked_turn_false_positive(live_server, admin_user, conversation, browser_page):
    page = browser_page
    page.goto(f"{live_server.url}/admin/login/?next=/admin/memproc/")
    page.fill("#id_username", admin_user.get_username())
    page.fill("#id_password", "password")
    page.click("input[type=submit]")
    page.wait_for_selector(".memproc-counts")
    assert "blocked turns to review" in page.inner_text(".memproc-counts")

    page.click("text=blocked turns to review")
    page.click("tr:has-text('pii-detector') td.field-blocked a")
    assert "My card is 4111 1111 1111 1111" in page.inner_text("#content-main")
    page.click("a.memproc-review-link")
    page.check("input[name=status][value=false_positive]")
    page.fill("textarea[name=note]", "A test card number from QA")
    page.click("#memproc-review-form input[type=submit]")
    page.wait_for_selector(".messagelist")
    assert "marked false positive" in page.inner_text(".messagelist")

    log = models.TripwireLog.objects.get(pk=conversation.pending.pk)
    assert (log.status, log.note, log.reviewed_by_id) == (
        "false_positive",
        "A test card number from QA",
        admin_user.pk,
    )
    assert log.reviewed_at is not None

    page.goto(live_server.url + reverse("admin:memproc_thread_change", args=[quote(conversation.thread.pk)]))
    page.wait_for_selector(".memproc-message")
    assert page.locator(".memproc-message").count() == 200
    page.locator("details.memproc-tool-call summary").first.click()  # unfold one tool call for the picture
    page.locator("#transcript").evaluate("section => section.scrollIntoView()")
    page.screenshot(path=str(artifacts_dir() / "admin-transcript.png"))
