"""Ready-made guardrail processors: put them in an Agent's `input_processors` / `output_processors`.

    from memproc.guardrails import (
        PIIDetector, PromptInjectionDetector, UnicodeNormalizer,
        ModerationProcessor, SystemPromptScrubber, MaxLength,
    )

All of them work offline by default; PIIDetector, PromptInjectionDetector and ModerationProcessor
can also ask a judge model (`model="provider/model"` or a ChatModel) and fall back to their offline
detector when it fails. Imports are lazy, so importing this package loads no detector.

Each one screens the channels it declares (`guard.channels`; `channels=` to choose): "input",
"history" and "recall" (what memory brings back), "working_memory", "tool_result", "output",
"stream" (see `memproc.guardrails._channels`). Defaults: PromptInjectionDetector input, history,
recall, working memory and tool results; PIIDetector input, tool results, output and stream;
ModerationProcessor input, output and stream. On memory channels a hit is withheld from the prompt
and recorded for review, never a blocked turn; on tool results the result is redacted or replaced
with a note the model reads. Detectors read a folded copy of the text (look-alikes, invisible
characters, fullwidth digits) and apply what they find to the text as written; UnicodeNormalizer
removes only the characters that smuggle and never folds what is stored.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "MaxLength",
    "ModerationProcessor",
    "PIIDetector",
    "PromptInjectionDetector",
    "SystemPromptScrubber",
    "UnicodeNormalizer",
]

_LAZY = {
    "MaxLength": "memproc.guardrails.max_length",
    "ModerationProcessor": "memproc.guardrails.moderation",
    "PIIDetector": "memproc.guardrails.pii_detector",
    "PromptInjectionDetector": "memproc.guardrails.prompt_injection_detector",
    "SystemPromptScrubber": "memproc.guardrails.system_prompt_scrubber",
    "UnicodeNormalizer": "memproc.guardrails.unicode_normalizer",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'memproc.guardrails' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
