"""memproc's errors: one root with stable codes; leaves also subclass the builtin they refine."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ImproperlyConfigured


class MemprocError(Exception):
    code = "memproc_error"


class ConfigurationError(MemprocError, ImproperlyConfigured):
    code = "configuration_error"


class ValidationError(MemprocError, ValueError):
    """Input that memproc refuses (bad message shape, unknown role, bad working memory)."""

    code = "invalid"


class ThreadOwnershipError(MemprocError, PermissionError):
    """A thread exists but belongs to another resource."""

    code = "thread_owner_mismatch"


class TripWire(MemprocError):
    """Raised by `ProcessorContext.abort()`; caught by the runner, never by user code."""

    code = "tripwire"

    def __init__(
        self,
        reason: str,
        *,
        processor_id: str = "",
        retry: bool = False,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.processor_id = processor_id
        self.retry = retry
        self.metadata = dict(metadata or {})


class ModelError(MemprocError):
    """A model provider failed; the API answers 502."""

    code = "model_error"


class ModelAuthenticationError(ModelError):
    code = "model_authentication"


class ModelRateLimitError(ModelError):
    code = "model_rate_limited"


class ModelUnavailableError(ModelError):
    """Timeouts, connection failures and 5xx: transient, worth a retry."""

    code = "model_unavailable"


class ModelResponseError(ModelError):
    """The provider answered something memproc cannot use (bad request, bad JSON)."""

    code = "model_bad_response"


class EmbedderUnavailable(MemprocError):
    """Transient embedder failure; background tasks retry it."""

    code = "embedder_unavailable"


class ToolError(MemprocError):
    code = "tool_error"


class AttachmentError(MemprocError, ValueError):
    """A file memproc refuses. `code`: too_large, type_not_allowed or undecodable; `metadata` says
    which file and why (name, size, limit, content_type)."""

    code = "attachment_error"

    def __init__(self, message: str, *, code: str | None = None, metadata: dict[str, Any] | None = None):
        super().__init__(message)
        if code:
            self.code = code
        self.metadata = dict(metadata or {})
