"""The attachment storage's network timeouts: an S3Storage left on botocore's defaults (60 s to
connect, 60 s per read, each call tried up to five times) keeps an upload or a download waiting for
minutes on an S3 endpoint that accepts connections and never answers. memproc never overrides a
site's `client_config`; it says so here instead."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.conf import settings as django_settings
from django.core.checks import CheckMessage, Warning
from django.utils.module_loading import import_string

from memproc.conf import DEFAULTS, user_settings

# botocore's default connect and read timeouts, in seconds: a config at or above it was not tuned.
BOTOCORE_DEFAULT_TIMEOUT = 60
S3_HINT = (
    'Give the storage OPTIONS a "client_config" with short waits, for example '
    'botocore.config.Config(connect_timeout=5, read_timeout=10, retries={"total_max_attempts": 2, '
    '"mode": "standard"}) (or set AWS_S3_CLIENT_CONFIG): a call then fails after at most '
    "attempts × (connect_timeout + read_timeout) seconds and the request answers 503."
)


def attachment_storage_alias() -> str:
    configured = user_settings()
    alias = DEFAULTS["ATTACHMENT_STORAGE"]
    if isinstance(configured, Mapping):
        alias = configured.get("ATTACHMENT_STORAGE", alias)
    storages = getattr(django_settings, "STORAGES", {})
    return alias if alias in storages else "default"


def s3_timeouts(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """memproc.W008: the attachment storage is an S3Storage whose botocore config keeps the default
    (or longer) connect or read timeout. The storage is not built: its class and options are read."""
    alias = attachment_storage_alias()
    spec = getattr(django_settings, "STORAGES", {}).get(alias)
    if not isinstance(spec, Mapping) or not _is_s3_storage(spec.get("BACKEND")):
        return []
    options = spec.get("OPTIONS") or {}
    config = options.get("client_config", getattr(django_settings, "AWS_S3_CLIENT_CONFIG", None))
    waits = [getattr(config, name, None) for name in ("connect_timeout", "read_timeout")]
    if config is not None and all(
        isinstance(wait, int | float) and wait < BOTOCORE_DEFAULT_TIMEOUT for wait in waits
    ):
        return []
    what = "no client_config" if config is None else "a client_config with a timeout of 60 s or more"
    return [
        Warning(
            f"STORAGES[{alias!r}], memproc's attachment storage, is an S3Storage with {what}: "
            "an S3 endpoint that never answers keeps an upload or a download waiting for minutes.",
            hint=S3_HINT,
            obj="STORAGES",
            id="memproc.W008",
        )
    ]


def _is_s3_storage(backend: Any) -> bool:
    try:
        from storages.backends.s3 import S3Storage

        return isinstance(backend, str) and issubclass(import_string(backend), S3Storage)
    except (ImportError, TypeError):
        return False  # no django-storages, or a BACKEND that does not import (Django reports that)
