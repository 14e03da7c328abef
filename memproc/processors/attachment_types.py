"""The files of attachments as AttachmentUploader and the attachment services pass them on: an inline
file found in a message part, the same file checked and decoded, the file staged for a turn, and
`AttachmentStore`, the protocol of where files are staged.

They live in the processor layer because the store protocol processors use (`MemoryStore.
attachment_store`) and the turn's state (`Turn.attachments`) name them; the Django store in
memproc.services.attachments implements the protocol.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = ["AttachmentStore", "CheckedFile", "InlineFile", "StagedAttachment"]


@dataclass(frozen=True, slots=True)
class InlineFile:
    """One inline file of a message part, not decoded yet."""

    payload: str | bytes
    encoding: str  # "base64" | "percent" (a data: URI without ;base64) | "raw" | "invalid"
    media_type: str  # declared, normalised ("" when the part gave none)
    name: str  # as given ("" when none)

    @property
    def estimated_size(self) -> int:
        """The decoded size, computed from the encoded length alone (exact for padded base64)."""
        n = len(self.payload)
        if self.encoding != "base64":
            return n
        tail = self.payload[-2:]
        padding = tail.count("=" if isinstance(tail, str) else b"=")
        return max(0, n * 3 // 4 - padding)


@dataclass(frozen=True, slots=True)
class CheckedFile:
    """A decoded file that passed every check."""

    data: bytes
    content_type: str
    name: str
    sha256: str

    @property
    def size(self) -> int:
        return len(self.data)


@dataclass(frozen=True, slots=True)
class StagedAttachment:
    """A file stored for a turn that has not committed yet.

    `created` is true when this turn wrote the file and its `Attachment` row does not exist yet (it
    is written at commit); false when an existing row of the resource (same sha256) is reused.
    """

    id: str
    resource_id: str
    name: str
    content_type: str
    size: int
    sha256: str
    file_name: str = ""
    created: bool = False


@runtime_checkable
class AttachmentStore(Protocol):
    """Where AttachmentUploader puts files. The Django one is `memproc.services.attachments.
    DjangoAttachmentStore` (the storage named by ATTACHMENT_STORAGE, rows deduplicated by sha256)."""

    def stage(self, *, resource_id: str, file: CheckedFile) -> StagedAttachment: ...
