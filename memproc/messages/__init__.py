"""Immutable message value types, and their conversion to stored JSON and the OpenAI chat format.

Processors receive these objects. They are frozen all the way down (dicts become `FrozenDict`, lists
become tuples), so a processor that tries to edit a message in place fails loudly instead of
silently changing what another processor or the store sees.

Import from here (`from memproc.messages import Message`); the modules are `types` (the value types
and their stored JSON), `formats` (caller input and the OpenAI chat format) and `checks` (checks of
untrusted input the value types do not make).
"""

from memproc.messages.checks import PART_FIELD_TYPES, UNSTORABLE, has_unstorable_text, part_errors
from memproc.messages.formats import MessageInput, from_openai, to_messages, to_openai
from memproc.messages.types import (
    PART_FIELDS,
    PART_TYPES,
    ROLES,
    AttachmentRef,
    FilePart,
    FrozenDict,
    Message,
    Part,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    freeze,
    message_from_content,
    new_id,
    part_from_json,
    part_to_json,
    thaw,
)

__all__ = [
    "PART_FIELDS",
    "PART_FIELD_TYPES",
    "PART_TYPES",
    "ROLES",
    "UNSTORABLE",
    "AttachmentRef",
    "FilePart",
    "FrozenDict",
    "Message",
    "MessageInput",
    "Part",
    "TextPart",
    "ToolCallPart",
    "ToolResultPart",
    "freeze",
    "from_openai",
    "has_unstorable_text",
    "message_from_content",
    "new_id",
    "part_errors",
    "part_from_json",
    "part_to_json",
    "thaw",
    "to_messages",
    "to_openai",
]
