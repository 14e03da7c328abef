"""The demo site's agents (autodiscovered by memproc at start-up).

With OPENAI_API_KEY or OPENAI_BASE_URL in the environment (project/settings.py puts them in
MEMPROC["MODELS"]["openai"]) both talk to a real OpenAI-compatible model, OPENAI_MODEL (default
gpt-4o-mini). Otherwise they use the offline `local/echo` model, a stand-in that repeats the message,
so the demo runs with no key and no network; their names and descriptions say so. DEMO_MODEL (a model
id such as "openai/gpt-4o") overrides both.
"""

from __future__ import annotations

import os

from django.conf import settings

from memproc import Agent, Memory
from memproc.agents import register
from memproc.guardrails import (
    MaxLength,
    ModerationProcessor,
    PIIDetector,
    PromptInjectionDetector,
    SystemPromptScrubber,
    UnicodeNormalizer,
)
from memproc.processors import TokenLimiter


def input_guardrails(*, personal_data: str, moderation: bool = False) -> list:
    """memproc's shipped guardrails in the order their docstrings ask for: hidden characters removed
    first, then the size check, the detectors, and the token budget last (it measures the final prompt).
    Only defaults and long-standing options, so the list works across guardrail versions."""
    detectors: list = [PromptInjectionDetector(), PIIDetector(strategy=personal_data)]
    if moderation:
        detectors.append(ModerationProcessor())
    return [UnicodeNormalizer(), MaxLength(limit=8000), *detectors, TokenLimiter(8000)]


def output_guardrails() -> list:
    return [PIIDetector(), SystemPromptScrubber()]


def demo_model() -> str:
    if os.environ.get("DEMO_MODEL"):
        return os.environ["DEMO_MODEL"]
    provider = getattr(settings, "MEMPROC", {}).get("MODELS", {}).get("openai") or {}
    if provider.get("api_key") or provider.get("base_url"):
        return f"openai/{os.environ.get('OPENAI_MODEL') or 'gpt-4o-mini'}"
    return "local/echo"


MODEL = demo_model()
OFFLINE = MODEL == "local/echo"
# What the chat page and the API's agent list show, so nobody takes the echo for a real model.
NAME_SUFFIX = " (offline echo model)" if OFFLINE else ""
MODEL_NOTE = (
    " Model: local/echo, an offline stand-in that repeats your message; set OPENAI_API_KEY or "
    "OPENAI_BASE_URL before scripts/demo for a real model."
    if OFFLINE
    else f" Model: {MODEL}."
)

register(
    Agent(
        id="assistant",
        name="Assistant with memory" + NAME_SUFFIX,
        description="Remembers the conversation, recalls related messages and keeps notes about you. "
        "Guardrails block prompt injection and redact personal data before anything is saved." + MODEL_NOTE,
        instructions="You are a friendly assistant. Use what you remember about the user.",
        model=MODEL,
        memory=Memory(
            last_messages=10,
            # A floor on similarity: the panel lists related messages, not the least unrelated ones.
            semantic_recall={"top_k": 3, "threshold": 0.2},
            working_memory=True,
            generate_title=True,
        ),
        input_processors=input_guardrails(personal_data="redact"),
        output_processors=output_guardrails(),
    ),
    replace=True,
)

register(
    Agent(
        id="guarded",
        name="Guarded assistant" + NAME_SUFFIX,
        description="Stricter guardrails: blocks prompt injection, personal data (e-mail addresses, card "
        "and phone numbers) and harmful content instead of redacting it; no semantic recall." + MODEL_NOTE,
        instructions="You are a careful assistant.",
        model=MODEL,
        memory=Memory(last_messages=10, working_memory=True),
        input_processors=input_guardrails(personal_data="block", moderation=True),
        output_processors=output_guardrails(),
    ),
    replace=True,
)
