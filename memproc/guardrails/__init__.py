"""Ready-made guardrail processors: put them in an Agent's `input_processors` / `output_processors`.

    from memproc.guardrails import (
        PIIDetector, PromptInjectionDetector, UnicodeNormalizer,
        ModerationProcessor, SystemPromptScrubber, MaxLength,
    )

All of them work offline by default; PIIDetector, PromptInjectionDetector and ModerationProcessor
can also ask a judge model (`model="provider/model"` or a ChatModel) and fall back to their offline
detector when it fails. Imports are lazy, so importing this package loads no detector.
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
