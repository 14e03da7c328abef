"""AttachmentUploader: moves the turn's inline files to the attachment storage, leaving references.

The checks (size from the encoded length, the content-type allow-list, strict decoding, magic-byte
sniffing) are plain functions in memproc.processors.attachment_checks, so the API and other services
can run the same ones; the file types and the `AttachmentStore` protocol are in
memproc.processors.attachment_types.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from memproc.conf import settings
from memproc.exceptions import AttachmentError, ConfigurationError
from memproc.messages import AttachmentRef, FilePart, Message, Part
from memproc.processors.attachment_checks import file_check, inline_file
from memproc.processors.attachment_types import AttachmentStore, CheckedFile, StagedAttachment
from memproc.processors.base import ProcessorContext

__all__ = ["AttachmentUploader"]


class AttachmentUploader:
    """Input: replaces every inline file of the turn's new messages (data: URIs, base64 text or bytes
    in a `FilePart`) with an `AttachmentRef` to a file stored once per resource (sha256 dedup).

    Each file is checked before anything is stored: its size from the encoded length before decoding
    (`max_bytes`, default MAX_ATTACHMENT_BYTES), its declared type against `content_types` (default
    ATTACHMENT_CONTENT_TYPES; None allows any), strict decoding, and its first bytes (a file that says
    it is a PNG must be one; text must be UTF-8). A failure aborts the turn with metadata `{"code":
    "too_large" | "type_not_allowed" | "undecodable", "name", "size", "limit", "content_type"}`.

    Files are stored at once (their names are unique, so concurrent turns never share one), but
    their rows are written only when the turn commits; a turn that is blocked or fails deletes the
    files it wrote (see `Turn.attachments`). Remote files (`FilePart.url`) and messages loaded from
    memory are left alone. Never mutates; returns new messages. `Memory` puts it first on input
    whenever it saves messages; placed in `input_processors` (same id), it replaces that one.
    """

    id = "attachment-uploader"

    def __init__(
        self,
        *,
        max_bytes: int | None = None,
        content_types: Iterable[str] | None = None,
        storage: AttachmentStore | None = None,
    ) -> None:
        if max_bytes is not None and (
            isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes <= 0
        ):
            raise ConfigurationError("AttachmentUploader(max_bytes=...) must be a positive integer")
        if isinstance(content_types, str):
            raise ConfigurationError("AttachmentUploader(content_types=...) must be a list of types")
        if storage is not None and not callable(getattr(storage, "stage", None)):
            raise ConfigurationError(
                "AttachmentUploader(storage=...) must be an AttachmentStore (with a stage() method); "
                'to change the Django storage, set MEMPROC["ATTACHMENT_STORAGE"]'
            )
        self.max_bytes = max_bytes
        self.content_types = None if content_types is None else tuple(content_types)
        self.storage = storage

    def limits(self) -> tuple[int, tuple[str, ...] | None]:
        allowed = self.content_types
        if allowed is None and settings.ATTACHMENT_CONTENT_TYPES is not None:
            allowed = tuple(settings.ATTACHMENT_CONTENT_TYPES)
        return self.max_bytes or int(settings.MAX_ATTACHMENT_BYTES), allowed

    def get_store(self, ctx: ProcessorContext) -> AttachmentStore:
        if self.storage is not None:
            return self.storage
        if ctx.store is None:
            raise ConfigurationError("AttachmentUploader needs storage=... outside a turn with memory")
        return ctx.store.attachment_store()

    def process_input(self, ctx: ProcessorContext) -> list[Message] | None:
        new_ids = {m.id for m in ctx.new_messages}
        found = [
            (i, j, file)
            for i, message in enumerate(ctx.messages)
            if message.id in new_ids
            for j, part in enumerate(message.parts)
            if isinstance(part, FilePart) and (file := inline_file(part)) is not None
        ]
        if not found:
            return None
        max_bytes, allowed = self.limits()
        checked: list[tuple[int, int, CheckedFile]] = []
        for i, j, file in found:  # every file is checked before any is stored
            try:
                checked.append((i, j, file_check(file, max_bytes=max_bytes, content_types=allowed)))
            except AttachmentError as exc:
                ctx.abort(str(exc), metadata={"code": exc.code, **exc.metadata})
        refs = self._store_all(ctx, checked)
        messages = list(ctx.messages)
        for i in sorted({i for i, _, _ in checked}):
            parts: list[Part] = list(messages[i].parts)
            for j in (j for ci, j, _ in checked if ci == i):
                parts[j] = refs[(i, j)]
            messages[i] = messages[i].replace(parts=tuple(parts))
        return messages

    def _store_all(
        self, ctx: ProcessorContext, checked: Sequence[tuple[int, int, CheckedFile]]
    ) -> dict[tuple[int, int], AttachmentRef]:
        store = self.get_store(ctx)
        staged_list = ctx.turn.attachments if ctx.turn is not None else ctx.state.setdefault("staged", [])
        by_sha: dict[str, StagedAttachment] = {}
        refs: dict[tuple[int, int], AttachmentRef] = {}
        for i, j, file in checked:
            staged = by_sha.get(file.sha256)
            if staged is None:
                staged = store.stage(resource_id=ctx.resource_id or "", file=file)
                staged_list.append(staged)  # registered at once, so a later failure cleans it up
                by_sha[file.sha256] = staged
            refs[(i, j)] = AttachmentRef(
                attachment_id=staged.id, name=file.name, media_type=file.content_type, size=file.size
            )
        return refs
