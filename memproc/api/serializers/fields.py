"""Fields shared by the API's serializers: client-chosen ids and JSON objects."""

from __future__ import annotations

from typing import Any

from django.core.validators import RegexValidator
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from memproc.messages import has_unstorable_text, thaw

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


JSON_OBJECT_SCHEMA = {"type": "object", "additionalProperties": True}


def validate_json_text(value: Any) -> Any:
    if has_unstorable_text(value):
        raise serializers.ValidationError("NUL characters and lone surrogates are not allowed.")
    return value


class StringField(serializers.CharField):
    """A CharField that takes a JSON string only, as the schema says (`type: string`): DRF's would
    also take a number and store its text (`{"title": 0.0}` became the title "0.0")."""

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


@extend_schema_field(ID_SCHEMA)
class IdField(StringField):
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
