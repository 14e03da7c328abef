"""Serving an attachment to a person: always as a download, never as a page of the site.

A client chooses a file's name and says what type it is; served inline on the site's origin, a
`notes.html` sent as text would run as HTML with the session of whoever opens it (an operator in the
admin). So files are stored under a name the server chooses (the extension follows the checked type,
from a short list of types that are safe to show; others get `.bin`), and memproc serves them with
`Content-Disposition: attachment`, `X-Content-Type-Options: nosniff`, a sandboxing
Content-Security-Policy and a content type from the same list (others as
`application/octet-stream`). Storages that sign URLs (S3) are asked to send the same headers.
"""

from __future__ import annotations

import inspect

from django.http import HttpResponse
from django.utils.http import content_disposition_header

from memproc import models
from memproc.conf import settings
from memproc.services.attachments.files import attachment_read
from memproc.services.attachments.types import served_type
from memproc.storage import storage_errors

__all__ = ["attachment_download_response", "attachment_download_url"]


def download_headers(attachment: models.Attachment) -> dict[str, str]:
    return {
        "Content-Type": served_type(attachment.content_type),
        "Content-Disposition": content_disposition_header(True, attachment.name or "attachment"),
        "X-Content-Type-Options": "nosniff",
        "Content-Security-Policy": "sandbox; default-src 'none'",
    }


def attachment_download_response(attachment: models.Attachment) -> HttpResponse:
    """The file as a download; StorageUnavailable if the storage fails or lost it."""
    data = attachment_read(attachment=attachment)
    headers = download_headers(attachment)
    response = HttpResponse(data, content_type=headers.pop("Content-Type"))
    for name, value in headers.items():
        response[name] = value
    return response


def attachment_download_url(attachment: models.Attachment) -> str | None:
    """A signed URL that makes the storage itself answer with the download headers (S3Storage's
    `parameters`), or None for a storage that cannot: memproc's own download view serves those."""
    storage = attachment.file.storage
    try:
        accepted = inspect.signature(storage.url).parameters
    except (TypeError, ValueError):
        return None
    if "parameters" not in accepted or "expire" not in accepted:
        return None
    headers = download_headers(attachment)
    parameters = {
        "ResponseContentType": headers["Content-Type"],
        "ResponseContentDisposition": headers["Content-Disposition"],
    }
    with storage_errors("making a file's URL"):
        return storage.url(
            attachment.file.name, parameters=parameters, expire=int(settings.ATTACHMENT_URL_EXPIRY)
        )
