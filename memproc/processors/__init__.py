"""Processors: the protocol, the runner and the ready-made memory processors."""

from __future__ import annotations

from typing import Any

from memproc.exceptions import TripWire
from memproc.processors.base import Processor, ProcessorContext

__all__ = [
    "AttachmentUploader",
    "ContextOverflowRecovery",
    "MessageHistory",
    "Parallel",
    "Processor",
    "ProcessorContext",
    "SemanticRecall",
    "TokenLimiter",
    "ToolCallFilter",
    "TripWire",
    "WorkingMemory",
]

_LAZY = {
    "MessageHistory": "memproc.processors.message_history",
    "SemanticRecall": "memproc.processors.semantic_recall",
    "WorkingMemory": "memproc.processors.working_memory",
    "TokenLimiter": "memproc.processors.token_limiter",
    "ToolCallFilter": "memproc.processors.tool_call_filter",
    "AttachmentUploader": "memproc.processors.attachments",
    "Parallel": "memproc.processors.parallel",
    "ContextOverflowRecovery": "memproc.processors.context_overflow",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(name)
