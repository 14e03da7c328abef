"""The file types memproc serves as what they are, and the extension a stored file of each gets."""

from __future__ import annotations

from memproc.processors.attachment_checks import normalise_type

__all__ = ["OPAQUE", "SAFE_TYPES", "served_type", "stored_extension"]

# Types a browser shows without running anything, with the extension a stored file of that type gets.
SAFE_TYPES = {
    "image/png": ".png",
    "image/jpeg": ".jpg",
    "image/gif": ".gif",
    "image/webp": ".webp",
    "application/pdf": ".pdf",
    "text/plain": ".txt",
    "text/csv": ".csv",
    "text/markdown": ".md",
    "application/json": ".json",
}
OPAQUE = "application/octet-stream"


def served_type(content_type: str) -> str:
    """The type a file is served as: its own when it is on the safe list, else opaque bytes."""
    base = normalise_type(content_type)
    return base if base in SAFE_TYPES else OPAQUE


def stored_extension(content_type: str) -> str:
    return SAFE_TYPES.get(normalise_type(content_type), ".bin")
