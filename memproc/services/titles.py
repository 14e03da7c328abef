"""Thread titles written by the agent's model from the thread's first user message.

`Memory(generate_title=True)` uses the agent's own model and the default instructions below; like
Mastra's `generateTitle`, it may also be a dict `{"model": "provider/model" | ChatModel,
"instructions": "..."}` to title with a cheaper model or other wording.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from memproc import models
from memproc.llm import resolve_model
from memproc.llm.types import ModelRequest
from memproc.messages import Message

logger = logging.getLogger(__name__)

TITLE_INSTRUCTIONS = (
    "You write the title of a conversation from the first message the user sent.\n"
    "- Summarise what the user wants in at most 80 characters.\n"
    "- Do not use quotes or colons.\n"
    "- Answer with the title alone: your whole answer is used as the title."
)
MAX_TITLE_CHARS = 80
# The model sees at most this much of a long first message.
MAX_PROMPT_CHARS = 4000
_PREFIX = re.compile(r"^\s*(?:title|thread title|conversation title)\s*[:\-–—]\s*", re.I)
_QUOTES = "\"'`“”‘’«»*#"


def thread_title_generate(
    *, thread_key: str, model: Any = None, instructions: str | None = None
) -> str | None:
    """Titles an untitled thread from its first user message; returns the title, or None if unchanged.

    The title is written by `model` (a ChatModel or "provider/model"; None: the DEFAULT_MODEL
    setting's) with `instructions` (None: TITLE_INSTRUCTIONS); `title_options` derives both from an
    agent's `Memory(generate_title=...)`.
    Does nothing when the thread is gone, already has a title, or has no user text. The title is
    written with a conditional UPDATE, so a title set meanwhile (by a user, the API, the admin) is
    never overwritten; `updated_at` is left alone, so titling does not reorder a thread list.
    Raises the model's errors (ModelUnavailableError and ModelRateLimitError are transient).
    """
    title = models.Thread.objects.filter(pk=thread_key).values_list("title", flat=True).first()
    if title is None or title:
        return None
    first = _first_user_text(thread_key)
    if not first:
        return None
    request = _title_request(first, instructions=instructions or TITLE_INSTRUCTIONS)
    response = resolve_model(model).generate(request)
    new_title = clean_title(response.text) or clean_title(first)
    if not new_title:
        return None
    updated = models.Thread.objects.filter(pk=thread_key, title="").update(title=new_title)
    return new_title if updated else None


def clean_title(text: str) -> str:
    """One line, no wrapping quotes or "Title:" prefix, at most MAX_TITLE_CHARS (cut at a word)."""
    line = next((ln for ln in (text or "").splitlines() if ln.strip()), "")
    line = _PREFIX.sub("", line).strip().strip(_QUOTES).strip()
    line = " ".join(line.split())
    if len(line) <= MAX_TITLE_CHARS:
        return line
    cut = line[: MAX_TITLE_CHARS - 1]
    if " " in cut:
        cut = cut.rsplit(" ", 1)[0]
    return cut.rstrip(" ,.;:-") + "…"


def _first_user_text(thread_key: str) -> str:
    texts = (
        models.Message.objects.filter(thread_id=thread_key, role=models.Message.Role.USER)
        .order_by("sequence")
        .values_list("text", flat=True)[:5]
    )
    return next((t.strip() for t in texts if t.strip()), "")


def title_options(*, generate_title: Any, agent_model: Any) -> dict[str, Any]:
    """The model and instructions of `Memory(generate_title=True | {"model", "instructions"})`: the
    dict's model, else the agent's; the dict's instructions, else None (the default ones)."""
    options = generate_title if isinstance(generate_title, dict) else {}
    model = options.get("model")
    return {
        "model": model if model is not None else agent_model,
        "instructions": options.get("instructions") or None,
    }


def _title_request(first_message: str, *, instructions: str) -> ModelRequest:
    return ModelRequest(
        messages=[
            Message.create("system", instructions),
            Message.create("user", first_message[:MAX_PROMPT_CHARS]),
        ],
        tools=[],
    )
