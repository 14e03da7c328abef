"""The `<memproc-chat>` component (memproc/static/memproc/chat.js) in headless Chromium on a live server:
it streams, renders Markdown without running markup from the model, shows a tripwire banner, and a
reload brings the conversation back."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core.management import call_command

from memproc import Agent, Memory, models
from memproc.agents import register, unregister
from memproc.events import StreamEvent
from memproc.exceptions import ModelUnavailableError
from memproc.llm.types import ModelRequest, ModelResponse
from tests.browser import CHROMIUM, LAUNCH_ARGS

ARTIFACTS = Path(
    os.environ.get("MEMPROC_TEST_ARTIFACTS", Path(__file__).resolve().parents[2] / "test-artifacts")
)
MARKDOWN = (
    "Here is **bold**, `code` and a [link](https://example.com/docs).\n\n"
    "- one\n- two\n\n"
    "<img src=x onerror=\"document.title='pwned'\"> and [bad](javascript:alert(1))\n\n"
    "```python\nprint('<b>hi</b>')\n```"
)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


class GatedModel:
    """The first answer waits, after its first word, until the test opens the gate (so the test sees it
    half-written); later answers are Markdown."""

    id = "test/gated-markdown"

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.turns = 0

    def generate(self, request: ModelRequest) -> ModelResponse:
        return ModelResponse(text=MARKDOWN)

    def stream(self, request: ModelRequest) -> Iterator[StreamEvent]:
        self.turns += 1
        if self.turns == 1:
            yield StreamEvent(type="text-delta", text="Hello")
            if not self.gate.wait(10):
                raise ModelUnavailableError("the test never opened the gate")
            yield StreamEvent(type="text-delta", text=" world")
        else:
            for i in range(0, len(MARKDOWN), 16):
                yield StreamEvent(type="text-delta", text=MARKDOWN[i : i + 16])
        yield StreamEvent(type="finish", usage={}, finish_reason="stop")


class BlockWord:
    id = "block-word"

    def process_input(self, ctx):
        if "pineapple" in ctx.messages[-1].text:
            ctx.abort("Pineapple is not allowed here")


@pytest.fixture
def model():
    model = GatedModel()
    register(
        Agent(id="widget-test", model=model, memory=Memory(last_messages=10), input_processors=[BlockWord()]),
        replace=True,
    )
    yield model
    model.gate.set()
    unregister("widget-test")


@pytest.fixture
def page(live_server, monkeypatch):
    from playwright.sync_api import sync_playwright

    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # ORM set-up under Playwright's event loop
    call_command("demo_setup", stdout=open(os.devnull, "w"))
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        page = browser.new_page(viewport={"width": 1100, "height": 900})
        page.set_default_timeout(15000)
        yield page
        browser.close()
        from django.db import connections

        connections.close_all()


def login(page, base: str, then: str) -> None:
    page.goto(f"{base}/admin/login/?next={then}")
    page.fill("#id_username", "admin")
    page.fill("#id_password", "memproc-demo")
    page.click("input[type=submit]")
    page.wait_for_url(f"{base}{then}")


def stored_texts(thread_id: str) -> list[str]:
    return [m.text for m in models.Message.objects.filter(thread__public_id=thread_id).order_by("sequence")]


def eventually(read, timeout: float = 10.0):
    """The value `read()` settles on: the live server commits in its own thread and connection, and
    a loaded machine can show the reply a moment before this test's connection reads the rows."""
    deadline = time.monotonic() + timeout
    while True:
        value = read()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


def send(page, text: str) -> None:
    """Sends once the component is idle, so that each message is a turn of its own: a reply shows as
    finished at its finish chunk, a moment before the stream closes (Enter while busy queues the box)."""
    page.locator("memproc-chat button.send:not([disabled])").wait_for()
    page.fill("memproc-chat textarea", text)
    page.press("memproc-chat textarea", "Enter")


def test_the_component_streams_renders_blocks_and_remembers(page, live_server, model):
    base = live_server.url
    login(page, base, "/widget/?agent=widget-test")
    chat = page.locator("memproc-chat")
    assert chat.locator(".message").count() == 0

    # Streams: the first word shows while the model is still writing, and nothing is saved yet.
    send(page, "hello")
    pending = chat.locator(".message.assistant.pending")
    pending.locator("text=Hello").wait_for()
    assert "world" not in pending.inner_text()
    assert not models.Message.objects.exists()
    model.gate.set()
    chat.locator(".message.assistant:not(.pending)").wait_for()
    assert chat.locator(".message.assistant").inner_text() == "Hello world"
    thread_id = page.evaluate("localStorage.getItem('memproc-chat:widget-test')")
    assert eventually(lambda: stored_texts(thread_id)) == ["hello", "Hello world"], thread_id

    # Markdown, safely: formatting renders, the model's markup stays text, unsafe links lose their target.
    send(page, "show me markdown")
    page.wait_for_function(
        "document.querySelector('memproc-chat').shadowRoot"
        ".querySelectorAll('.message.assistant:not(.pending)').length === 2"
    )
    answer = chat.locator(".message.assistant").nth(1)
    answer.locator("pre code.language-python").wait_for()
    assert answer.locator("strong").inner_text() == "bold"
    assert answer.locator("li").all_inner_texts() == ["one", "two"]
    assert answer.locator("a").count() == 1
    assert answer.locator("a").get_attribute("href") == "https://example.com/docs"
    assert answer.locator("img").count() == 0 and page.title() != "pwned"
    assert "<img src=x" in answer.inner_text() and "<b>hi</b>" in answer.locator("pre").inner_text()
    page.screenshot(path=str(ARTIFACTS / "component-markdown.png"), full_page=True)

    # A tripwire: a banner, the message marked blocked, no reply, nothing saved.
    send(page, "I like pineapple")
    banner = chat.locator(".banner.tripwire")
    banner.wait_for()
    assert "block-word" in banner.inner_text() and "Pineapple is not allowed" in banner.inner_text()
    assert chat.locator(".message.user.blocked").inner_text() == "I like pineapple"
    assert chat.locator(".message.assistant").count() == 2
    assert models.Message.objects.filter(thread__public_id=thread_id).count() == 4
    page.screenshot(path=str(ARTIFACTS / "component-tripwire.png"), full_page=True)

    # A reload keeps the conversation (the stored messages; the blocked one was never saved).
    page.reload()
    page.wait_for_function(
        "document.querySelector('memproc-chat').shadowRoot.querySelectorAll('.message').length === 4"
    )
    assert chat.locator(".message.user").all_inner_texts() == ["hello", "show me markdown"]
    assert chat.locator(".message.assistant").first.inner_text() == "Hello world"
    assert chat.locator(".message.assistant").nth(1).locator("strong").inner_text() == "bold"
    assert page.evaluate("localStorage.getItem('memproc-chat:widget-test')") == thread_id

    # And the conversation goes on in the same thread.
    send(page, "once more")
    page.wait_for_function(
        "document.querySelector('memproc-chat').shadowRoot"
        ".querySelectorAll('.message.assistant:not(.pending)').length === 3"
    )
    assert models.Message.objects.filter(thread__public_id=thread_id).count() == 6

    # "New chat" starts another thread.
    chat.locator("button.new").click()
    assert chat.locator(".message").count() == 0
    assert page.evaluate("localStorage.getItem('memproc-chat:widget-test')") != thread_id


def enter_while_the_first_reply_streams(page, base: str):
    """Sends "first" (its reply held half-written by the gated model), then "second" with Enter; returns
    the component."""
    login(page, base, "/widget/?agent=widget-test")
    chat = page.locator("memproc-chat")
    send(page, "first")
    chat.locator(".message.assistant.pending >> text=Hello").wait_for()
    page.fill("memproc-chat textarea", "second")
    page.press("memproc-chat textarea", "Enter")
    return chat


def test_a_message_sent_while_a_reply_streams_goes_once_it_ends(page, live_server, model):
    # Enter while the reply is still being written: the text waits in the box, edits included.
    chat = enter_while_the_first_reply_streams(page, live_server.url)
    page.fill("memproc-chat textarea", "second, edited")
    assert chat.locator(".message.user").all_inner_texts() == ["first"]
    assert chat.locator("textarea").input_value() == "second, edited"

    model.gate.set()
    page.wait_for_function(
        "document.querySelector('memproc-chat').shadowRoot"
        ".querySelectorAll('.message.assistant:not(.pending)').length === 2"
    )
    assert chat.locator(".message.user").all_inner_texts() == ["first", "second, edited"]
    assert chat.locator("textarea").input_value() == ""
    thread_id = page.evaluate("localStorage.getItem('memproc-chat:widget-test')")
    assert eventually(lambda: len(stored_texts(thread_id)) == 4)
    texts = stored_texts(thread_id)
    assert texts[:2] == ["first", "Hello world"] and texts[2] == "second, edited", texts


def test_a_queued_message_stays_in_the_box_when_the_conversation_changes(page, live_server, model):
    chat = enter_while_the_first_reply_streams(page, live_server.url)
    chat.locator("button.new").click()  # aborts the streaming turn
    # The turn's end has run once Send is enabled again; a queued submit would have emptied the box.
    chat.locator("button.send:not([disabled])").wait_for()
    assert chat.locator("textarea").input_value() == "second"
    assert chat.locator(".message").count() == 0
    assert not models.Message.objects.filter(text="second").exists()
