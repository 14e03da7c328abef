"""Input serializers validate requests; output serializers render results. Neither writes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.core.validators import RegexValidator
from django.urls import reverse
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from memproc import models
from memproc.conf import settings
from memproc.exceptions import MemprocError
from memproc.messages import (
    Message,
    TextPart,
    has_unstorable_text,
    part_errors,
    part_to_json,
    thaw,
    to_messages,
)
from memproc.models import public_thread_id
from memproc.processors.attachments import inline_files_check
from memproc.processors.conversation import unanswered_calls
from memproc.selectors.messages import thread_messages
from memproc.services.attachments import attachment_download_url

# The grammar of ids that clients choose (threads, resources): they travel in URL paths and name
# files' folders, so no slash, nothing a client or a proxy would normalise ("." and "..", whitespace
# at either end), nothing unprintable. ID_REGEX says all of it, so the OpenAPI schema's `pattern` is
# the rule the API applies; IdValidator only adds which part was broken.
ID_RULES = (
    "An id is 1 to 255 printable characters, without '/' and without whitespace at either end; "
    "'.' and '..' are not ids."
)

# "Printable" in ID_RULES: none of Unicode's controls (Cc), formats (Cf), surrogates (Cs), private-use
# characters (Co) or separators (Zs, Zl, Zp) but the space, by Unicode 15.0. Unassigned code points
# pass: a pattern can name these ranges, not "every assigned character" (tests/api/test_schema.py
# compares the table with `unicodedata`).
NON_PRINTABLE = (
    (0x0000, 0x001F), (0x007F, 0x00A0), (0x00AD, 0x00AD), (0x0600, 0x0605), (0x061C, 0x061C),
    (0x06DD, 0x06DD), (0x070F, 0x070F), (0x0890, 0x0891), (0x08E2, 0x08E2), (0x1680, 0x1680),
    (0x180E, 0x180E), (0x2000, 0x200F), (0x2028, 0x202F), (0x205F, 0x2064), (0x2066, 0x206F),
    (0x3000, 0x3000), (0xD800, 0xF8FF), (0xFEFF, 0xFEFF), (0xFFF9, 0xFFFB), (0x110BD, 0x110BD),
    (0x110CD, 0x110CD), (0x13430, 0x1343F), (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A), (0xE0001, 0xE0001),
    (0xE0020, 0xE007F), (0xF0000, 0xFFFFD), (0x100000, 0x10FFFD),
)  # fmt: skip


SURROGATES = (0xD800, 0xDFFF)


def _code_point(value: int) -> str:
    """`\\uXXXX` (which ECMA-262, Python and Rust regexes read alike), or the character itself past
    the BMP (where they spell escapes differently)."""
    return f"\\u{value:04x}" if value <= 0xFFFF else chr(value)


def _pattern_ranges() -> list[tuple[int, int]]:
    """NON_PRINTABLE without the surrogates: a pattern cannot name them (they are no characters of
    a valid string), so IdValidator refuses a lone one itself."""
    ranges = []
    for a, b in NON_PRINTABLE:
        if a <= SURROGATES[0] <= b:
            ranges += [(a, SURROGATES[0] - 1)] if a < SURROGATES[0] else []
            a = SURROGATES[1] + 1
        ranges += [(a, b)] if a <= b else []
    return ranges


def _id_class(allowed_space: bool = False, allowed_dot: bool = True) -> str:
    """A character class of id characters: printable, not '/', optionally not ' ' or '.'."""
    ranges = "".join(
        _code_point(a) if a == b else f"{_code_point(a)}-{_code_point(b)}" for a, b in _pattern_ranges()
    )
    return f"[^/{'' if allowed_space else ' '}{'' if allowed_dot else '.'}{ranges}]"


_END, _INSIDE, _NOT_DOT = _id_class(), _id_class(allowed_space=True), _id_class(allowed_dot=False)
# One character but ".", two but "..", or more with no space at either end.
ID_PATTERN = rf"^(?:{_NOT_DOT}{_END}?|\.{_NOT_DOT}|{_END}{_INSIDE}+{_END})$"
ID_REGEX = rf"\A{ID_PATTERN[1:-1]}\Z"
# The OpenAPI schema of an id, set here because drf-spectacular would escape the characters past the
# BMP in Python's spelling (`\\U000e0001`), which an ECMA-262 regex does not read.
ID_SCHEMA = {"type": "string", "minLength": 1, "maxLength": 255, "pattern": ID_PATTERN}


def _is_printable(char: str) -> bool:
    code = ord(char)
    return not any(a <= code <= b for a, b in NON_PRINTABLE)


class IdValidator(RegexValidator):
    """ID_REGEX (which drf-spectacular publishes as the `pattern`), with a message naming the rule
    the value breaks."""

    regex = ID_REGEX

    def __call__(self, value: Any) -> None:
        if self.regex.search(str(value)) and all(_is_printable(char) for char in value):
            return
        if "/" in value:
            message = "Use an id without slashes."
        elif not all(_is_printable(char) for char in value):
            message = "Use an id of printable characters only."
        elif value in (".", ".."):
            message = "'.' and '..' are not ids."
        else:
            message = "Use an id without whitespace at either end."
        raise serializers.ValidationError(message)


ROLE_INPUT = ["user", "assistant", "tool"]
PART_TYPES = ["text", "file", "tool-call", "tool-result", "attachment"]

PART_SCHEMA = {
    "type": "object",
    "description": "A message part: text, file, tool-call, tool-result or attachment.",
    "properties": {"type": {"type": "string", "enum": PART_TYPES}},
    "required": ["type"],
    "additionalProperties": True,
}
MESSAGE_INPUT_OBJECT = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "description": "Optional client id; a stored id is not saved twice."},
        "role": {"type": "string", "enum": ROLE_INPUT, "default": "user"},
        "content": {
            "oneOf": [{"type": "string"}, {"type": "array", "items": PART_SCHEMA}],
            "description": "Text, or a list of parts (memproc parts or OpenAI content parts).",
        },
    },
    "required": ["content"],
}
MESSAGES_INPUT_SCHEMA = {
    "description": "One user message as a string, one `{role, content}` object, or a list of either.",
    "oneOf": [
        {"type": "string"},
        MESSAGE_INPUT_OBJECT,
        {"type": "array", "minItems": 1, "items": {"oneOf": [{"type": "string"}, MESSAGE_INPUT_OBJECT]}},
    ],
}
JSON_OBJECT_SCHEMA = {"type": "object", "additionalProperties": True}
WORKING_MEMORY_SCHEMA = {
    "description": "Markdown text, or (schema mode) a JSON object.",
    "oneOf": [{"type": "string"}, JSON_OBJECT_SCHEMA],
}


def validate_json_text(value: Any) -> Any:
    if has_unstorable_text(value):
        raise serializers.ValidationError("NUL characters and lone surrogates are not allowed.")
    return value


@extend_schema_field(ID_SCHEMA)
class IdField(serializers.CharField):
    """A client-chosen id (a thread's, a resource's), checked against ID_RULES and taken as given (no
    trimming). The rules join the field's help text, so the OpenAPI schema states them."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("max_length", 255)
        kwargs.setdefault("min_length", 1)  # the schema's `minLength`; a blank id is refused first
        kwargs.setdefault("trim_whitespace", False)
        help_text = kwargs.get("help_text") or ""
        if ID_RULES not in help_text:  # DRF re-runs __init__ with these kwargs when it copies a field
            kwargs["help_text"] = f"{help_text} {ID_RULES}".strip()
        super().__init__(**kwargs)
        self.validators.append(IdValidator())

    def to_internal_value(self, data: Any) -> str:
        """A JSON string, as the schema says; DRF's CharField would also take a number."""
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


@extend_schema_field(JSON_OBJECT_SCHEMA)
class JSONObjectField(serializers.JSONField):
    """A JSON object (not a list or a scalar) that any database can store."""

    default_error_messages = {"not_object": "Expected a JSON object."}

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        data = super().to_internal_value(data)
        if not isinstance(data, dict):
            self.fail("not_object")
        return validate_json_text(data)

    def to_representation(self, value: Any) -> Any:
        return thaw(value)


@extend_schema_field(MESSAGES_INPUT_SCHEMA)
class MessagesField(serializers.JSONField):
    """`messages` as `Agent.generate` takes them; checked by normalising them, handed on unchanged."""

    def to_internal_value(self, data: Any) -> Any:
        data = super().to_internal_value(data)
        validate_json_text(data)
        items = data if isinstance(data, list) else [data]
        limit = settings.MAX_REQUEST_MESSAGES
        if len(items) > limit:
            raise serializers.ValidationError(f"At most {limit} messages per request.")
        for item in items:
            if isinstance(item, dict) and "id" in item and not _good_message_id(item["id"]):
                raise serializers.ValidationError("A message id must be a string of 1 to 255 characters.")
        try:
            messages = to_messages(data)
        except (MemprocError, TypeError, AttributeError, KeyError, ValueError) as exc:
            raise serializers.ValidationError(str(exc) or "Invalid messages.") from exc
        if any(m.role == "system" for m in messages) and not settings.API_ALLOW_SYSTEM_MESSAGES:
            raise serializers.ValidationError(
                "System messages cannot be sent; they come from the agent "
                '(a site can allow them with MEMPROC["API_ALLOW_SYSTEM_MESSAGES"]).'
            )
        errors = [error for m in messages for part in m.parts for error in part_errors(part)]
        if errors:
            raise serializers.ValidationError(errors[:5])
        by_message = message_errors(messages)
        if by_message:
            raise serializers.ValidationError(by_message)
        inline_files_check(messages)
        return data


def message_errors(
    messages: Sequence[Message], *, thread_calls: set[str] | None = None
) -> dict[int, dict[str, list[str]]]:
    """Field errors of single messages, by their index: `{index: {"content" | "id" | "tool_call_id":
    [...]}}`. Ids must be unique within the request; a tool call must be answered by the tool messages
    right after its assistant message.

    A message needs content: text that is not blank, a file, a tool call or a tool result; tool calls
    are an assistant message's, tool results a tool message's. A tool result must answer a call of
    the assistant message its run of tool messages follows; results before the first assistant
    message of the list can only answer the thread's last message, whose calls are `thread_calls`
    (None: not known here, so those are left to the caller to check)."""
    errors: dict[int, dict[str, list[str]]] = {}
    answerable: set[str] | None = None  # no assistant message yet: the thread's calls
    unanswered = unanswered_calls(messages)
    seen: set[str] = set()
    for index, message in enumerate(messages):
        found: dict[str, list[str]] = {}
        if message.id in seen:
            found["id"] = [f"Message id {message.id!r} is used twice in this request; ids must be unique."]
        seen.add(message.id)
        if all(isinstance(p, TextPart) and not p.text.strip() for p in message.parts):
            found["content"] = ["This message is empty: send text, a file, a tool call or a tool result."]
        elif message.role == "tool" and not message.tool_results:
            found["content"] = ["A tool message holds tool results."]
        elif message.role != "tool" and message.tool_results:
            found["content"] = ["Only tool messages hold tool results."]
        elif message.role != "assistant" and message.tool_calls:
            found["content"] = ["Only assistant messages hold tool calls."]
        calls = answerable if answerable is not None else thread_calls
        if calls is not None:
            orphans = [r.tool_call_id for r in message.tool_results if r.tool_call_id not in calls]
            if orphans:
                found["tool_call_id"] = [
                    f"No tool call {call_id!r} to answer: a tool result must follow the assistant "
                    "message that made the call (in this request, or the thread's last message)."
                    for call_id in orphans[:5]
                ]
        if index in unanswered:
            found.setdefault("tool_call_id", []).extend(
                f"Tool call {call_id!r} has no result: the tool messages right after this message must "
                "answer each of its calls."
                for call_id in unanswered[index][:5]
            )
        if found:
            errors[index] = found
        if message.role == "assistant":
            answerable = {c.tool_call_id for c in message.tool_calls}
        elif message.role == "user":
            answerable = set()
    return errors


def thread_open_calls(thread_key: str | None) -> set[str]:
    """The tool calls of the thread's last message when it is an assistant message: the calls a
    turn's leading tool results may answer. One query; none without a thread."""
    if not thread_key:
        return set()
    last = thread_messages(thread_key=thread_key).reverse().values_list("role", "content").first()
    if last is None or last[0] != "assistant":
        return set()
    parts = (last[1] or {}).get("parts") or ()
    return {
        str(p.get("tool_call_id"))
        for p in parts
        if isinstance(p, Mapping) and p.get("type") == "tool-call" and p.get("tool_call_id")
    }


def _good_message_id(value: Any) -> bool:
    return isinstance(value, str) and 0 < len(value) <= 255


# --- output shapes -----------------------------------------------------------------------------------


class ErrorSerializer(serializers.Serializer):
    detail = serializers.CharField()
    code = serializers.CharField()


class AgentMemorySerializer(serializers.Serializer):
    last_messages = serializers.JSONField(help_text="How many recent messages are loaded, or false.")
    semantic_recall = serializers.BooleanField()
    working_memory = serializers.JSONField(allow_null=True, help_text='null, or {"mode", "scope"}.')
    read_only = serializers.BooleanField()


class AgentSerializer(serializers.Serializer):
    id = serializers.CharField()
    name = serializers.CharField()
    description = serializers.CharField()
    model = serializers.CharField(source="model_id")
    tools = serializers.SerializerMethodField()
    memory = serializers.SerializerMethodField()

    def get_tools(self, agent: Any) -> list[str]:
        return [t.name for t in agent.tools]

    @extend_schema_field(AgentMemorySerializer(allow_null=True))
    def get_memory(self, agent: Any) -> dict[str, Any] | None:
        memory = agent.memory
        if memory is None:
            return None
        wm = memory.working_memory_processor
        return {
            "last_messages": memory.last_messages,
            "semantic_recall": memory.uses_semantic_recall,
            "working_memory": {"mode": wm.mode, "scope": wm.scope} if wm is not None else None,
            "read_only": memory.read_only,
        }


class MessageSerializer(serializers.Serializer):
    """A stored message row or a `memproc.messages.Message`, rendered alike."""

    id = serializers.CharField()
    role = serializers.ChoiceField(choices=models.Message.Role.choices)
    parts = serializers.SerializerMethodField()
    created_at = serializers.DateTimeField(allow_null=True)
    thread_id = serializers.SerializerMethodField()

    @extend_schema_field({"type": "string", "nullable": True})
    def get_thread_id(self, message: Any) -> str | None:
        """A row holds its thread's key; a value and the API speak the thread id."""
        return public_thread_id(message.thread_id) if message.thread_id else None

    @extend_schema_field({"type": "array", "items": PART_SCHEMA})
    def get_parts(self, message: Any) -> list[dict[str, Any]]:
        if isinstance(message, Message):
            return [part_to_json(p) for p in message.parts]
        return list((message.content or {}).get("parts", []))


class MessagePageSerializer(serializers.Serializer):
    """One page of a thread's messages (cursor pagination)."""

    next = serializers.URLField(allow_null=True)
    previous = serializers.URLField(allow_null=True)
    results = MessageSerializer(many=True)


class TripwireSerializer(serializers.Serializer):
    reason = serializers.CharField()
    processor_id = serializers.CharField()
    phase = serializers.ChoiceField(choices=models.TripwireLog.Phase.choices)
    retry = serializers.BooleanField()
    metadata = JSONObjectField()


class GenerateRequestSerializer(serializers.Serializer):
    messages = MessagesField()
    thread_id = IdField(required=False, allow_null=True, help_text="Continue (or start) this thread.")
    resource_id = IdField(
        required=False, allow_null=True, help_text="The owner; defaults to the caller's resource."
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        """Tool results before the request's first assistant message answer the thread's last
        message; without such a call they would reach the model as orphans."""
        messages = to_messages(attrs["messages"])
        first = next((i for i, m in enumerate(messages) if m.role == "assistant"), len(messages))
        if any(m.tool_results for m in messages[:first]):
            # The view passes its thread lookup: a thread id names a thread within its resource.
            find = self.context.get("find_thread")
            thread_id = attrs.get("thread_id")
            thread = find(thread_id, attrs.get("resource_id")) if find and thread_id else None
            errors = message_errors(messages, thread_calls=thread_open_calls(thread.pk if thread else None))
            if errors:
                raise serializers.ValidationError({"messages": errors})
        return attrs


class GenerateUploadSerializer(serializers.Serializer):
    """The multipart form of a generate/stream request: the fields, plus files for the last user message."""

    messages = serializers.CharField(help_text="The messages as JSON, or the text of one user message.")
    thread_id = IdField(required=False, help_text="Continue (or start) this thread.")
    resource_id = IdField(required=False, help_text="The owner; defaults to the caller's resource.")
    files = serializers.ListField(child=serializers.FileField(), required=False, help_text="Files to attach.")


class GenerateResultSerializer(serializers.Serializer):
    text = serializers.CharField(help_text='The final assistant text ("" when blocked).')
    messages = MessageSerializer(many=True, help_text="The turn's new messages, as saved.")
    tripwire = TripwireSerializer(allow_null=True)
    thread_id = serializers.CharField(allow_null=True)
    resource_id = serializers.CharField(allow_null=True)
    usage = JSONObjectField(help_text="Token usage reported by the model.")
    memory = JSONObjectField(help_text="What memory did: history ids, recalled messages, working memory.")


def generate_result_data(result: Any) -> dict[str, Any]:
    """`GenerateResultSerializer(result).data`, rendered by one serializer that every turn shares: a new
    serializer deep-copies its declared fields, which cost 9x the rendering itself (140 against
    16 µs). Rendering only reads the bound fields, so threads may share them."""
    return _GENERATE_RESULT.to_representation(result)


_GENERATE_RESULT = GenerateResultSerializer()


# --- threads -----------------------------------------------------------------------------------------


class ThreadSerializer(serializers.ModelSerializer):
    id = serializers.CharField(
        source="public_id", read_only=True, help_text="The thread id, within its resource."
    )
    metadata = JSONObjectField(read_only=True)

    class Meta:
        model = models.Thread
        fields = ["id", "resource_id", "title", "agent_id", "metadata", "created_at", "updated_at"]
        read_only_fields = fields


class ThreadCreateSerializer(serializers.Serializer):
    id = IdField(required=False, help_text="Optional; generated when omitted.")
    title = serializers.CharField(required=False, allow_blank=True, max_length=255, default="")
    resource_id = IdField(required=False, help_text="The owner; defaults to the caller's resource.")
    metadata = JSONObjectField(required=False, default=dict)


class ThreadUpdateSerializer(serializers.Serializer):
    title = serializers.CharField(required=False, allow_blank=True, max_length=255)
    metadata = JSONObjectField(required=False)


class ThreadCloneSerializer(serializers.Serializer):
    id = IdField(required=False, help_text="The new thread's id; generated when omitted.")
    title = serializers.CharField(required=False, allow_blank=True, max_length=255)


# --- turn records ------------------------------------------------------------------------------------

TURN_MANIFEST_SCHEMA = {
    "type": "object",
    "description": "Why the model saw what it saw: ids and numbers, never message text.",
    "properties": {
        "history": {"type": "array", "items": {"type": "string"}, "description": "History message ids."},
        "recalled": {
            "type": "array",
            "description": "Messages semantic recall added, with their score and source thread.",
            "items": {
                "type": "object",
                "properties": {
                    "id": {"type": "string"},
                    "thread_id": {"type": "string", "nullable": True},
                    "score": {"type": "number", "nullable": True},
                },
            },
        },
        "recall_error": {"type": "boolean", "description": "Recall failed; the turn ran without it."},
        "echoed": {"type": "integer", "description": "Messages the client re-sent that were already stored."},
        "working_memory": {
            "type": "object",
            "nullable": True,
            "description": "The working memory the model was given.",
            "properties": {
                "scope": {"type": "string", "enum": ["thread", "resource"]},
                "key": {"type": "string"},
                "version": {"type": "integer"},
            },
        },
        "tokens": {
            "type": "object",
            "nullable": True,
            "description": "Token counts after the token limiter, when there is one.",
            "properties": {
                "total": {"type": "integer"},
                "limit": {"type": "integer"},
                "dropped": {"type": "integer", "description": "History messages dropped to fit."},
            },
        },
        "processors": {
            "type": "array",
            "description": "Time spent in each processor hook.",
            "items": {
                "type": "object",
                "properties": {
                    "processor": {"type": "string"},
                    "hook": {"type": "string"},
                    "ms": {"type": "number"},
                    "calls": {"type": "integer"},
                },
            },
        },
    },
    "additionalProperties": True,
}


@extend_schema_field(TURN_MANIFEST_SCHEMA)
class TurnManifestField(serializers.JSONField):
    pass


class TurnRecordSerializer(serializers.ModelSerializer):
    usage = JSONObjectField(read_only=True, help_text="Token usage the model reported, summed over steps.")
    manifest = TurnManifestField(read_only=True)
    message_ids = serializers.ListField(
        child=serializers.CharField(), read_only=True, help_text="The messages this turn saved."
    )
    tripwire_id = serializers.UUIDField(
        read_only=True, allow_null=True, help_text="The tripwire log of a blocked turn."
    )

    class Meta:
        model = models.TurnRecord
        fields = [
            "id",
            "agent_id",
            "thread_id",
            "resource_id",
            "status",
            "model",
            "steps",
            "usage",
            "manifest",
            "message_ids",
            "tripwire_id",
            "error",
            "started_at",
            "duration_ms",
        ]
        read_only_fields = fields


class TurnRecordPageSerializer(serializers.Serializer):
    """One page of a thread's turn records, newest first (cursor pagination)."""

    next = serializers.URLField(allow_null=True)
    previous = serializers.URLField(allow_null=True)
    results = TurnRecordSerializer(many=True)


# --- working memory ----------------------------------------------------------------------------------


@extend_schema_field(WORKING_MEMORY_SCHEMA)
class WorkingMemoryValueField(serializers.JSONField):
    def to_internal_value(self, data: Any) -> Any:
        data = super().to_internal_value(data)
        if not isinstance(data, (str, dict)):
            raise serializers.ValidationError("Expected Markdown text or a JSON object.")
        return validate_json_text(data)


class WorkingMemorySerializer(serializers.Serializer):
    scope = serializers.ChoiceField(choices=models.WorkingMemoryRevision.Scope.choices)
    key = serializers.CharField(help_text="The thread id or the resource id.")
    working_memory = WorkingMemoryValueField()
    version = serializers.IntegerField()
    mode = serializers.ChoiceField(choices=[("markdown", "Markdown"), ("schema", "JSON schema")])


class WorkingMemoryUpdateSerializer(serializers.Serializer):
    working_memory = WorkingMemoryValueField(
        help_text="Markdown mode: the whole new text. Schema mode: an object merged into the current one."
    )
    replace = serializers.BooleanField(
        required=False, default=False, help_text="Schema mode: replace instead of merging."
    )


# --- tripwires and attachments -----------------------------------------------------------------------


class TripwireLogSerializer(serializers.ModelSerializer):
    metadata = JSONObjectField(read_only=True)
    content = serializers.JSONField(
        read_only=True, allow_null=True, help_text="The blocked messages, if stored."
    )
    reviewed_by = serializers.SerializerMethodField()

    class Meta:
        model = models.TripwireLog
        fields = [
            "id",
            "agent_id",
            "processor_id",
            "phase",
            "reason",
            "retry",
            "metadata",
            "thread_id",
            "resource_id",
            "content",
            "status",
            "reviewed_by",
            "reviewed_at",
            "note",
            "created_at",
        ]
        read_only_fields = fields

    @extend_schema_field({"type": "string", "nullable": True})
    def get_reviewed_by(self, log: models.TripwireLog) -> str | None:
        return log.reviewed_by.get_username() if log.reviewed_by_id else None


class TripwireReviewSerializer(serializers.Serializer):
    status = serializers.ChoiceField(choices=models.TripwireLog.Status.choices)
    note = serializers.CharField(required=False, allow_blank=True, default="", max_length=10_000)


class AttachmentSerializer(serializers.ModelSerializer):
    thread_id = serializers.SerializerMethodField()
    url = serializers.SerializerMethodField()

    class Meta:
        model = models.Attachment
        fields = ["id", "name", "content_type", "size", "sha256", "created_at", "thread_id", "url"]
        read_only_fields = fields

    @extend_schema_field({"type": "string", "nullable": True})
    def get_thread_id(self, attachment: models.Attachment) -> str | None:
        return public_thread_id(attachment.message.thread_id) if attachment.message_id else None

    @extend_schema_field({"type": "string", "format": "uri", "nullable": True})
    def get_url(self, attachment: models.Attachment) -> str | None:
        """Where the file downloads from: the storage's signed URL that sends the download headers
        (S3), else memproc's `download/` view (never the storage's plain URL, served inline)."""
        if not attachment.file:
            return None
        url = attachment_download_url(attachment) or reverse(
            "memproc:attachment-download", args=[attachment.pk]
        )
        request = self.context.get("request")
        return request.build_absolute_uri(url) if request is not None and url.startswith("/") else url
