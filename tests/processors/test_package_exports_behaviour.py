"""memproc.processors names its ready-made processors lazily: each name is the class of its module,
and a name it does not have is an AttributeError naming it (so hasattr and getattr defaults work)."""

from __future__ import annotations

import importlib

import pytest

import memproc.processors as processors

LAZY = {
    "MessageHistory": "memproc.processors.message_history",
    "SemanticRecall": "memproc.processors.semantic_recall",
    "WorkingMemory": "memproc.processors.working_memory",
    "TokenLimiter": "memproc.processors.token_limiter",
    "ToolCallFilter": "memproc.processors.tool_call_filter",
    "AttachmentUploader": "memproc.processors.attachments",
    "Parallel": "memproc.processors.parallel",
    "ContextOverflowRecovery": "memproc.processors.context_overflow",
}


@pytest.mark.parametrize("name, module", sorted(LAZY.items()))
def test_each_processor_name_is_its_modules_class(name, module):
    value = getattr(processors, name)
    assert value is getattr(importlib.import_module(module), name)
    assert isinstance(value, type) and value.__name__ == name


def test_star_import_gives_every_public_name():
    namespace: dict = {}
    exec("from memproc.processors import *", namespace)
    assert set(LAZY) | {"Processor", "ProcessorContext", "TripWire"} <= set(namespace)


def test_an_unknown_name_is_an_attribute_error_naming_it():
    with pytest.raises(AttributeError) as caught:
        processors.NoSuchProcessor  # noqa: B018
    assert caught.value.args == ("NoSuchProcessor",)
    assert not hasattr(processors, "message_history_typo")
    assert getattr(processors, "Nope", "default") == "default"
