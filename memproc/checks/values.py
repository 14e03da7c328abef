"""Validators of MEMPROC's plain values: numbers, booleans, choices, retention, sizes, storage."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from django.core.checks import CheckMessage
from django.core.files.storage import storages

from memproc.checks.base import Validator, did_you_mean, error, installed, is_int, pip_install, show, warning
from memproc.conf import DEFAULT_RETENTION, DEFAULTS

BACKGROUND_MODES = ("inline", "celery")
HNSW_INDEX_TYPES = ("vector", "halfvec")
# A PostgreSQL memory size: a number of kB, or a number with a (case-sensitive) unit.
POSTGRES_MEMORY = re.compile(r"^[1-9][0-9]*\s*(B|kB|MB|GB|TB)?$")
# "type/subtype", "type/*", "*/*" or "*", as `type_allowed` matches them.
CONTENT_TYPE = re.compile(r"^(\*|\*/\*|[A-Za-z0-9][\w.+-]*/(\*|[A-Za-z0-9][\w.+-]*))$")


def integer(minimum: int, maximum: int | None = None, *, unit: str = "") -> Validator:
    """A whole number (not a bool, float or string) from `minimum` to `maximum`."""
    bounds = f"from {minimum} to {maximum}" if maximum is not None else f"of at least {minimum}"
    of_unit = f" of {unit}" if unit else ""

    def validate(key: str, value: Any) -> list[CheckMessage]:
        if is_int(value) and value >= minimum and (maximum is None or value <= maximum):
            return []
        default = DEFAULTS.get(key)
        hint = f"Use a whole number{of_unit} {bounds}"
        hint += f", like the default {default!r}." if is_int(default) else "."
        if isinstance(value, str):
            hint += f" A string such as {value!r} is not read as a number."
        return [
            error(
                key, f"is {show(value)}; it must be a whole number{of_unit} {bounds}.", hint=hint, id="E007"
            )
        ]

    return validate


def optional(validate: Validator) -> Validator:
    """None (the server's own value), or what `validate` accepts."""

    def validate_optional(key: str, value: Any) -> list[CheckMessage]:
        return [] if value is None else validate(key, value)

    return validate_optional


def seconds(key: str, value: Any) -> list[CheckMessage]:
    """A positive number of seconds (an int or a float, not a bool or string)."""
    if isinstance(value, int | float) and not isinstance(value, bool) and 0 < value < float("inf"):
        return []
    return [
        error(
            key,
            f"is {show(value)}; it must be a positive number of seconds.",
            hint=f"Use a number of seconds, like the default {DEFAULTS.get(key)!r}.",
            id="E007",
        )
    ]


def boolean(key: str, value: Any) -> list[CheckMessage]:
    if isinstance(value, bool):
        return []
    return [
        error(
            key,
            f"is {show(value)}, not True or False.",
            hint='Use True or False (a string such as "false" counts as true).',
            id="E005",
        )
    ]


def background(key: str, value: Any) -> list[CheckMessage]:
    if value not in BACKGROUND_MODES:
        return [
            error(
                key,
                f"is {show(value)}.{did_you_mean(value, BACKGROUND_MODES)}",
                hint='Use "inline" (in-process, after commit) or "celery".',
                id="E004",
            )
        ]
    if value == "celery" and not installed("celery"):
        return [
            error(
                key,
                'is "celery", but the celery package is not installed: every background job would fail.',
                hint=f'{pip_install("celery")}, or use BACKGROUND "inline".',
                id="E008",
            )
        ]
    return []


def hnsw_index_type(key: str, value: Any) -> list[CheckMessage]:
    if value in HNSW_INDEX_TYPES:
        return []
    return [
        error(
            key,
            f"is {show(value)}.{did_you_mean(value, HNSW_INDEX_TYPES)}",
            hint='Use "vector" (full precision, up to 2,000 dimensions) or "halfvec" (half the index, up '
            "to 4,000 dimensions).",
            id="E019",
        )
    ]


def retention(key: str, value: Any) -> list[CheckMessage]:
    """None, or a dict of some of DEFAULT_RETENTION's keys, each a number of days (>= 1) or None."""
    if value is None:
        return []
    known = sorted(DEFAULT_RETENTION)
    hint = f"A dict with some of {', '.join(known)}, each a number of days (at least 1) or None; or None."
    if not isinstance(value, Mapping):
        return [error(key, f"is {show(value)}, not a dict.", hint=hint, id="E006")]
    messages: list[CheckMessage] = []
    for name, days in value.items():
        if name not in DEFAULT_RETENTION:
            text = f"has an unknown key {name!r}.{did_you_mean(name, known)}"
            messages.append(error(key, text, hint=hint, id="E006"))
        elif days is not None and not (is_int(days) and days >= 1):
            text = f"is {show(days)}; it must be a whole number of days (at least 1) or None."
            messages.append(error((key, name), text, hint=hint, id="E006"))
    return messages


def content_types(key: str, value: Any) -> list[CheckMessage]:
    """None (every type), or a list of "type/subtype", "type/*" or "*/*"."""
    hint = 'A list such as ["image/png", "image/*", "application/pdf"], or None to allow every type.'
    if value is None:
        return []
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple, set, frozenset)):
        return [error(key, f"is {show(value)}, not a list of content types.", hint=hint, id="E016")]
    bad = [entry for entry in value if not (isinstance(entry, str) and CONTENT_TYPE.match(entry))]
    if bad:
        return [error(key, f"holds {show(bad)}, which are not content types.", hint=hint, id="E016")]
    return []


def postgres_memory(key: str, value: Any) -> list[CheckMessage]:
    """None, a PostgreSQL memory size ("1GB", "512MB"), or a positive number of kB."""
    if value is None or (is_int(value) and value > 0):
        return []
    if isinstance(value, str) and POSTGRES_MEMORY.match(value.strip()):
        return []
    return [
        error(
            key,
            f"is {show(value)}, not a PostgreSQL memory size.",
            hint='Use a size such as "1GB" or "512MB" (units are case-sensitive: kB, MB, GB, TB), '
            "or None to keep the server's maintenance_work_mem.",
            id="E017",
        )
    ]


def storage_alias(key: str, value: Any) -> list[CheckMessage]:
    """A key of STORAGES. The default alias may be missing: attachments then use "default"."""
    backends = storages.backends
    if isinstance(value, str) and (value in backends or value == DEFAULTS[key]):
        return []
    where = "not a string" if not isinstance(value, str) else "not a storage in STORAGES"
    return [
        error(
            key,
            f"is {show(value)}, {where}.{did_you_mean(value, backends)}",
            hint=f"Add {value!r} to STORAGES, or use one of its keys: {', '.join(sorted(backends))}.",
            id="E015",
        )
    ]


# --- keys that depend on each other ------------------------------------------------------------


def inline_within_max(values: Mapping[str, Any]) -> list[CheckMessage]:
    inline, limit = values.get("INLINE_ATTACHMENT_BYTES"), values.get("MAX_ATTACHMENT_BYTES")
    if inline is None or limit is None or inline <= limit:
        return []
    return [
        warning(
            "INLINE_ATTACHMENT_BYTES",
            f"({inline}) is larger than MAX_ATTACHMENT_BYTES ({limit}): every file memproc accepts is "
            "sent to the model as bytes.",
            hint="Lower it to at most MAX_ATTACHMENT_BYTES; to always send bytes to one provider, set "
            'MEMPROC["MODELS"][provider]["inline_attachments"] = True instead.',
            id="W004",
        )
    ]


def ef_construction_covers_m(values: Mapping[str, Any]) -> list[CheckMessage]:
    """pgvector refuses to build an HNSW index whose ef_construction is below 2 * m."""
    m, ef_construction = values.get("HNSW_M"), values.get("HNSW_EF_CONSTRUCTION")
    if m is None or ef_construction is None or ef_construction >= 2 * m:
        return []
    return [
        error(
            "HNSW_EF_CONSTRUCTION",
            f"({ef_construction}) is less than twice HNSW_M ({m}): pgvector refuses to build the index.",
            hint=f"Raise HNSW_EF_CONSTRUCTION to at least {2 * m}, or lower HNSW_M.",
            id="E018",
        )
    ]
