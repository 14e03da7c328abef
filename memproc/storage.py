"""The storage attachments live on, chosen by the ATTACHMENT_STORAGE setting at use time."""

from __future__ import annotations

from typing import Any

from django.core.files.storage import Storage, storages
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils.functional import LazyObject, empty

from memproc.conf import settings


class _AttachmentStorage(LazyObject):
    def _setup(self) -> None:
        alias = settings.ATTACHMENT_STORAGE
        if alias not in storages.backends:
            alias = "default"
        self._wrapped = storages[alias]


_storage = _AttachmentStorage()


def attachment_storage() -> Storage:
    """Callable storage for `Attachment.file`: keeps migrations free of the site's storage choice."""
    return _storage  # type: ignore[return-value]


@receiver(setting_changed)
def _reset_storage(*, setting: str, **kwargs: Any) -> None:
    if setting in ("MEMPROC", "STORAGES"):
        _storage._wrapped = empty
