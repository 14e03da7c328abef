"""The `<memproc-memory>` component (memproc/static/memproc/memory.js) in headless Chromium on the demo's
memory page: it shows what the agent remembers, a correction made there is a user revision that the
next turn's prompt holds, a pinned field is stored, and a message excluded there is not recalled again."""

from __future__ import annotations

import os

import pytest
from django.core.management import call_command

from memproc import Agent, Memory, models
from memproc.agents import register, unregister
from memproc.llm.types import ModelResponse, ToolCall
from memproc.processors.working_memory import DEFAULT_TEMPLATE
from memproc.testing import ScriptedModel
from tests.browser import CHROMIUM, LAUNCH_ARGS
from tests.integration.test_chat_component import ARTIFACTS, eventually, login, send

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

AGENT = "memory-view-test"
CAT = "I am Ada and my cat is called Tom"


@pytest.fixture
def model():
    ada = DEFAULT_TEMPLATE.replace("- **First Name**:", "- **First Name**: Ada")
    model = ScriptedModel(
        [
            ModelResponse(tool_calls=[ToolCall("wm1", "updateWorkingMemory", {"memory": ada})]),
            "Noted.",
            "Nice weather.",
            "Tom.",
            "I do not know.",
        ]
    )
    memory = Memory(last_messages=2, working_memory=True, semantic_recall={"top_k": 2, "message_range": 0})
    register(Agent(id=AGENT, model=model, memory=memory), replace=True)
    yield model
    unregister(AGENT)


@pytest.fixture
def page(live_server, monkeypatch):
    from playwright.sync_api import sync_playwright

    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # ORM set-up under Playwright's event loop
    call_command("demo_setup", stdout=open(os.devnull, "w"))
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        page.set_default_timeout(15000)
        yield page
        browser.close()
        from django.db import connections

        connections.close_all()


def turn(page, text: str, replies: int) -> None:
    """Sends `text` in the chat and waits for the `replies`th answer and the memory view's refresh."""
    send(page, text)
    page.wait_for_function(
        "document.querySelector('memproc-chat').shadowRoot"
        f".querySelectorAll('.message.assistant:not(.pending)').length === {replies}"
    )


def field(memory, name: str):
    return memory.locator(f"li.field[data-name='{name}']")


def prompt_text(model: ScriptedModel) -> str:
    return "\n".join(m.text for m in model.requests[-1].messages)


def test_view_correct_pin_and_exclude_and_the_next_prompt_reflects_it(page, live_server, model):
    base = live_server.url
    login(page, base, f"/memory/?agent={AGENT}")
    memory = page.locator("memproc-memory")
    field(memory, "First Name").locator(".value").wait_for()
    assert field(memory, "First Name").locator(".value").inner_text() == "not set"

    # The model remembers a name; after the turn the view shows it.
    turn(page, CAT, 1)
    field(memory, "First Name").locator(".value:text('Ada')").wait_for()
    turn(page, "How is the weather?", 2)
    turn(page, "what is my cat called", 3)  # the first message is out of the window: recalled
    recall = memory.locator(f"li.recall:has-text('{CAT}')").first
    recall.wait_for()
    assert "score" in recall.locator(".why").inner_text()
    page.screenshot(path=str(ARTIFACTS / "memory-view.png"), full_page=True)

    # Exclude it from recall.
    recall.get_by_role("button", name="Exclude from recall").click()
    memory.locator(f"li.excluded-item:has-text('{CAT}')").wait_for()
    assert eventually(lambda: models.Message.objects.filter(text=CAT, recall_excluded=True).exists())

    # Correct a field: a user revision with the signed-in user as actor.
    field(memory, "First Name").get_by_role("button", name="Edit First Name").click()
    field(memory, "First Name").get_by_label("New value for First Name").fill("Adeline")
    field(memory, "First Name").get_by_role("button", name="Save").click()
    field(memory, "First Name").locator(".value:text('Adeline')").wait_for()
    revision = eventually(lambda: models.WorkingMemoryRevision.objects.filter(source="user").first())
    assert revision is not None and revision.actor.get_username() == "admin"

    # Pin it.
    field(memory, "First Name").get_by_role("button", name="Pin First Name").click()
    field(memory, "First Name").get_by_role("button", name="Unpin First Name").wait_for()
    assert eventually(lambda: models.Resource.objects.filter(pinned_fields=["First Name"]).exists())
    page.screenshot(path=str(ARTIFACTS / "memory-view-edited.png"), full_page=True)

    # The next turn's prompt holds the correction and the pin, and the excluded message is not recalled.
    turn(page, "what is my cat called", 4)
    prompt = prompt_text(model)
    assert "- **First Name**: Adeline" in prompt and "keep them as they are: First Name" in prompt
    assert CAT not in prompt


def test_forget_takes_back_the_message_and_what_was_learnt_from_it(page, live_server, model):
    login(page, live_server.url, f"/memory/?agent={AGENT}")
    memory = page.locator("memproc-memory")
    turn(page, CAT, 1)
    field(memory, "First Name").locator(".value:text('Ada')").wait_for()
    turn(page, "How is the weather?", 2)
    turn(page, "what is my cat called", 3)
    recall = memory.locator(f"li.recall:has-text('{CAT}')").first
    recall.wait_for()

    # The first press only arms the button; nothing is forgotten until the second.
    recall.get_by_role("button", name="Forget").click()
    assert models.Message.objects.filter(text=CAT).exists()
    recall.get_by_role("button", name="Forget for good?").click()
    field(memory, "First Name").locator(".value:text('not set')").wait_for()
    memory.locator(f"li.recall:has-text('{CAT}')").wait_for(state="detached")
    assert eventually(lambda: not models.Message.objects.filter(text=CAT).exists())
    receipt = eventually(lambda: models.ForgetReceipt.objects.first())
    assert receipt is not None and receipt.actor.get_username() == "admin"
    page.screenshot(path=str(ARTIFACTS / "memory-view-forgotten.png"), full_page=True)

    # The next turn's prompt holds neither the message nor the name the model learnt from it.
    turn(page, "what is my cat called", 4)
    prompt = prompt_text(model)
    assert CAT not in prompt and "Ada" not in prompt


def test_the_chats_conversation_list_archives_and_brings_back(page, live_server, model):
    login(page, live_server.url, f"/memory/?agent={AGENT}")
    turn(page, CAT, 1)
    chat = page.locator("memproc-chat")
    chat.locator("details.threads > summary").click(position={"x": 4, "y": 4})
    row = chat.locator(".threads li[data-thread-id]").first
    row.wait_for()
    thread_id = row.get_attribute("data-thread-id")
    assert "current" in (row.get_attribute("class") or "")

    row.get_by_role("button", name="Archive").click()
    chat.locator(".threads li:text('No conversation yet.')").wait_for()
    assert eventually(
        lambda: models.Thread.objects.filter(public_id=thread_id, archived_at__isnull=False).exists()
    )

    chat.get_by_label("Show archived").check()
    archived = chat.locator(f".threads li.archived[data-thread-id='{thread_id}']")
    archived.wait_for()
    archived.get_by_role("button", name="Unarchive").click()
    chat.locator(f".threads li:not(.archived)[data-thread-id='{thread_id}']").wait_for()
    assert eventually(
        lambda: models.Thread.objects.filter(public_id=thread_id, archived_at__isnull=True).exists()
    )
