"""memproc's errors: one root with stable codes; leaves also subclass the builtin they refine."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.core.exceptions import ImproperlyConfigured


class MemprocError(Exception):
    code = "memproc_error"


class ConfigurationError(MemprocError, ImproperlyConfigured):
    code = "configuration_error"


class ValidationError(MemprocError, ValueError):
    """Input that memproc refuses (bad message shape, unknown role, bad working memory)."""

    code = "invalid"


class MessageConflict(ValidationError):
    """A message id that is already stored with other content or in another thread of its resource
    (message ids are per resource, so never another owner's), or that a concurrent request saved
    first. Nothing of the request was saved; the API answers 409."""

    code = "message_conflict"

    @classmethod
    def in_use(cls, ids: Iterable[str]) -> MessageConflict:
        """The one wording for ids in use, whether the API's check or a turn's history finds them."""
        return cls(
            f"Message ids already in use: {', '.join(sorted(ids))}; nothing was saved. A stored message "
            "may be sent again only unchanged and in its own thread; a new message needs a new id."
        )


class ThreadOwnershipError(MemprocError, PermissionError):
    """A thread exists but belongs to another resource. Kept for code that catches it: since thread
    ids are per resource (a thread id names a thread within its resource), memproc raises it no more."""

    code = "thread_owner_mismatch"


class ThreadNotFoundError(MemprocError, LookupError):
    """No thread has the id (a thread id names a thread within its resource)."""

    code = "thread_not_found"


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


class PublicMessageError(MemprocError):
    """An error whose `str` holds details for the server log (a provider's own message, its status,
    an internal URL) and whose `public_message` is what may be said to an API caller: what failed,
    in memproc's words. The API answers with `public_message` only."""

    public_message = "The request failed."

    def __init__(self, message: str = "", *, public_message: str | None = None) -> None:
        super().__init__(message)
        if public_message is not None:
            self.public_message = public_message


class ModelError(PublicMessageError):
    """A model provider failed; the API answers 502 with `public_message`."""

    code = "model_error"
    public_message = "The model provider failed."


class ModelAuthenticationError(ModelError):
    code = "model_authentication"
    public_message = "The model provider rejected the credentials."


class ModelRateLimitError(ModelError):
    code = "model_rate_limited"
    public_message = "The model provider is rate limiting requests; try again later."


class ModelUnavailableError(ModelError):
    """Timeouts, connection failures and 5xx: transient, worth a retry."""

    code = "model_unavailable"
    public_message = "The model provider is unavailable."


class ModelResponseError(ModelError):
    """The provider answered something memproc cannot use (bad request, bad JSON)."""

    code = "model_bad_response"
    public_message = "The model provider sent a reply memproc could not read."


class ModelContextLengthError(ModelResponseError):
    """The provider refused the request as longer than the model's context window (OpenAI: HTTP 400,
    `code: "context_length_exceeded"`). Not worth a plain retry; a `process_api_error` processor
    such as `ContextOverflowRecovery` may shorten the request and retry. `limit` and `requested`
    are the provider's token counts for the window and the request, when it said them."""

    code = "model_context_length"
    public_message = "The conversation is too long for the model's context window."

    def __init__(
        self,
        message: str = "",
        *,
        public_message: str | None = None,
        limit: int | None = None,
        requested: int | None = None,
    ) -> None:
        super().__init__(message, public_message=public_message)
        self.limit = limit
        self.requested = requested


class EmbedderUnavailable(PublicMessageError):
    """Transient embedder failure, or a reply with a vector that cannot be used (NaN, wrong size,
    zero); background tasks retry it. The API answers 503 with `public_message`."""

    code = "embedder_unavailable"
    public_message = "The embedder is unavailable."


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


class StorageUnavailable(PublicMessageError):
    """The attachment storage failed: unreachable, timed out, or answered an error (S3's 5xx, a full
    disk). Its text names what failed for the server log (it may hold the storage's URL); the API
    answers 503 with `public_message`. Nothing of the write that failed is kept."""

    code = "storage_unavailable"
    public_message = "The file storage is unavailable; try again later."


class RequestTooLarge(MemprocError, ValueError):
    """A request body larger than memproc reads (`memproc.api.parsers`); the API answers 413.
    `metadata` holds the declared or counted `size` (when known) and the `limit`."""

    code = "too_large"

    def __init__(self, message: str, *, limit: int, size: int | None = None) -> None:
        super().__init__(message)
        self.metadata: dict[str, Any] = {"limit": limit} if size is None else {"size": size, "limit": limit}


class PendingCallNotFound(MemprocError, LookupError):
    """No waiting tool call has the id, or the caller may not decide it (the API answers 404 for
    both, so a call one may not decide is not revealed)."""

    code = "pending_not_found"


class PendingCallConflict(MemprocError):
    """The tool call is no longer pending: someone decided it first, or it expired. The API
    answers 409; nothing changed."""

    code = "pending_conflict"
