"""The storage attachments live on, chosen by the ATTACHMENT_STORAGE setting at use time, and what
its failures mean to memproc (`storage_errors`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.core.files.storage import Storage, storages
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils.functional import LazyObject, empty

from memproc.admission import admission_paused
from memproc.conf import settings
from memproc.exceptions import StorageUnavailable

# Packages whose exceptions, raised by a storage call, are the storage failing: the AWS SDK that
# django-storages' S3Storage uses, and the Azure and Google Cloud SDKs of its other back ends.
STORAGE_ERROR_PACKAGES = frozenset({"botocore", "boto3", "s3transfer", "azure", "google"})


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


def is_storage_error(exc: BaseException) -> bool:
    """Whether an exception raised by a storage call is the storage failing: an OSError (a full disk,
    a refused connection, a missing file) or an error of a cloud storage SDK (botocore's
    EndpointConnectionError and timeouts, a ClientError such as S3's 5xx, boto3's S3UploadFailedError)."""
    if isinstance(exc, OSError):
        return True
    return type(exc).__module__.partition(".")[0] in STORAGE_ERROR_PACKAGES


@contextmanager
def storage_errors(action: str) -> Iterator[None]:
    """Raises StorageUnavailable, chained, for a storage failure inside the block. Its text (for the
    log) says what memproc was doing and what the storage raised, which may include its URL; the API
    answers with the exception's `public_message` only. Other exceptions pass through unchanged."""
    try:
        yield
    except StorageUnavailable:
        raise
    except Exception as exc:
        if not is_storage_error(exc):
            raise
        raise StorageUnavailable(f"The attachment storage failed while {action}: {exc!r}") from exc


@contextmanager
def storage_waiting(action: str) -> Iterator[None]:
    """`storage_errors(action)` around a call that goes over the network to the storage (a read, a
    write, a delete): while it waits, the request gives back its admission permit and its database
    connection (`memproc.admission.admission_paused`). How long it waits is the storage's to bound:
    for S3Storage, botocore's timeouts and retries in its `client_config` (memproc.W008)."""
    with admission_paused(), storage_errors(action):
        yield
