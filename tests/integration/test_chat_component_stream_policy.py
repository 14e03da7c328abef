"""`<memproc-chat>` on an agent whose output guardrail needs stream_policy="sentences": a reply shows
sentence by sentence while the model still writes, renders whole at the end, and a reply the
guardrail blocks never shows the blocked sentence, only the banner."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from memproc import Agent, Memory
from memproc.agents import register, unregister
from memproc.events import StreamEvent
from memproc.exceptions import ModelUnavailableError
from memproc.llm.types import ModelRequest, ModelResponse
from tests.integration.test_chat_component import login, page, send  # noqa: F401 (page: a fixture)
from tests.pipeline.test_stream_policy import BLOCKED, BlockTerm

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

FIRST = ["The", " first", " sentence", " is", " here.", " The"]
REST = [" second", " one", " ends."]

# Every text the shadow root's assistant messages ever showed, collected as the DOM changes.
WATCH = """() => {
  const root = document.querySelector('memproc-chat').shadowRoot;
  window.__seen = [];
  new MutationObserver(() => {
    for (const el of root.querySelectorAll('.message.assistant')) window.__seen.push(el.textContent);
  }).observe(root, { subtree: true, childList: true, characterData: true });
}"""


class SentenceModel:
    """The first answer stops after the first word of its second sentence until the test opens the
    gate; the second answer holds a term the guardrail blocks."""

    id = "test/sentences"

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.turns = 0

    def generate(self, request: ModelRequest) -> ModelResponse:
        raise AssertionError("streams only")

    def stream(self, request: ModelRequest) -> Iterator[StreamEvent]:
        self.turns += 1
        if self.turns == 1:
            yield from (StreamEvent(type="text-delta", text=w) for w in FIRST)
            if not self.gate.wait(10):
                raise ModelUnavailableError("the test never opened the gate")
            yield from (StreamEvent(type="text-delta", text=w) for w in REST)
        else:
            words = BLOCKED.split(" ")
            yield from (
                StreamEvent(type="text-delta", text=(" " if i else "") + w) for i, w in enumerate(words)
            )
        yield StreamEvent(type="finish", usage={}, finish_reason="stop")


@pytest.fixture
def model() -> Iterator[SentenceModel]:
    model = SentenceModel()
    agent = Agent(
        id="widget-policy", model=model, memory=Memory(last_messages=10), output_processors=[BlockTerm()]
    )
    assert agent.plan().stream_policy == "sentences"
    register(agent, replace=True)
    yield model
    model.gate.set()
    unregister("widget-policy")


def test_the_component_shows_screened_sentences_and_never_the_blocked_one(page, live_server, model):  # noqa: F811
    login(page, live_server.url, "/widget/?agent=widget-policy")
    chat = page.locator("memproc-chat")
    chat.locator("textarea").wait_for()
    page.evaluate(WATCH)

    # The first sentence shows while the model is still writing the second.
    send(page, "hello")
    pending = chat.locator(".message.assistant.pending")
    pending.locator("text=The first sentence is here.").wait_for()
    assert "second" not in pending.inner_text()
    model.gate.set()
    chat.locator(".message.assistant:not(.pending)").wait_for()
    assert (
        chat.locator(".message.assistant").inner_text() == "The first sentence is here. The second one ends."
    )

    # A blocked reply: the banner, no reply, and the blocked sentence was never on the page.
    send(page, "and the code?")
    banner = chat.locator(".banner.tripwire")
    banner.wait_for()
    assert "block-term" in banner.inner_text()
    assert chat.locator(".message.assistant").count() == 1
    seen = page.evaluate("window.__seen")
    assert any("The first sentence is here." in text for text in seen)  # the watch saw the first reply
    assert not [text for text in seen if "Zanzibar" in text or "vault" in text]
