"""`Idempotency-Key` on the turn endpoints (DESIGN §5): a repeat answers the first turn's result.

The first request with a key claims it by inserting an `IdempotencyRecord` (state running). The unique
(scope, key) constraint decides between concurrent requests: the one whose insert wins runs the turn,
the others answer 409 (retry later) and run nothing. A turn that saved keeps its result in the record
(state done), even when its client went away before the answer; a repeat with the same body then
replays it without running a turn, and one with another body answers 422. A turn that fails, or a
stream whose client goes away before the save, saved nothing (rule 9): its claim is released, so the
client may retry with the same key.

A claim names the process that runs it (`memproc.api.claim_owner`). A process killed mid-turn settles
and releases nothing: a repeat on its host finds it gone and takes the key over at once; a repeat on
another host cannot look, and takes over once the claim is older than the setting `IDEMPOTENCY_LEASE`
(seconds), which must exceed the longest turn.

Keys are scoped per caller (the user, else the resources the resolver grants) and per endpoint, so
two callers' keys never meet; a record expires after the setting `IDEMPOTENCY_TTL` (seconds), and the
retention purge deletes it. A kept answer holds the user's messages, so it names the resource and the
thread it came from: purging the resource or deleting the thread deletes it. A request without the
header costs nothing here: no query, no hashing.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from django.core.files.uploadedfile import UploadedFile
from django.db import DatabaseError, IntegrityError, transaction
from django.http import StreamingHttpResponse
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework import status
from rest_framework.exceptions import APIException
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.encoders import JSONEncoder

from memproc import logs
from memproc.api.claim_owner import ClaimOwner, owner_is_gone, this_process
from memproc.api.serializers.errors import ErrorSerializer
from memproc.api.sse import frame, sse_response
from memproc.conf import settings as memproc_settings
from memproc.db import memproc_db
from memproc.models import IdempotencyRecord
from memproc.turns.aio import in_thread
from memproc.turns.asgi import is_asgi

__all__ = [
    "HEADER",
    "IDEMPOTENCY_KEY_PARAMETER",
    "IDEMPOTENCY_RESPONSES",
    "REPLAYED_HEADER",
    "IdempotencyKeyInProgress",
    "IdempotencyKeyInvalid",
    "IdempotencyKeyReused",
    "idempotent_response",
    "idempotent_stream",
]

logger = logging.getLogger(__name__)

HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
MAX_KEY_LENGTH = 255
MAX_SCOPE_LENGTH = 255
MAX_ID_LENGTH = 255  # the resource_id and thread_id columns

Resources = Callable[[], "list[str] | None"]


# A key: 1 to MAX_KEY_LENGTH printable ASCII characters, no space at either end (HTTP servers strip
# them from header values, so a key that had them would not be the key the client keeps). The OpenAPI
# schema states the same pattern.
KEY_PATTERN = rf"[\x21-\x7e](?:[\x20-\x7e]{{0,{MAX_KEY_LENGTH - 2}}}[\x21-\x7e])?"
_KEY = re.compile(KEY_PATTERN)


class IdempotencyKeyInvalid(APIException):
    status_code = status.HTTP_400_BAD_REQUEST
    default_detail = (
        f"{HEADER} must be 1 to {MAX_KEY_LENGTH} printable ASCII characters, without a space at either end."
    )
    default_code = "idempotency_key_invalid"


class IdempotencyKeyInProgress(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = f"A request with this {HEADER} is still running; retry later."
    default_code = "idempotency_key_in_progress"
    wait = 1  # DRF's handler answers it as Retry-After


class IdempotencyKeyReused(APIException):
    status_code = status.HTTP_422_UNPROCESSABLE_ENTITY
    default_detail = f"This {HEADER} was used with a different request body; use a new key."
    default_code = "idempotency_key_reused"


IDEMPOTENCY_KEY_PARAMETER = OpenApiParameter(
    HEADER,
    str,
    OpenApiParameter.HEADER,
    required=False,
    pattern=f"^{KEY_PATTERN}$",
    description=(
        "Makes the request safe to retry: a repeat with the same key and body answers the first "
        "turn's result (with `Idempotent-Replayed: true`) and runs no second turn; one that arrives "
        "while the first runs answers 409, one with another body 422. Keys are per caller and endpoint "
        "and are kept for the setting `IDEMPOTENCY_TTL`; a failed turn releases its key."
    ),
)
IDEMPOTENCY_RESPONSES = {
    422: OpenApiResponse(ErrorSerializer, description=f"The {HEADER} was used with another request body.")
}


# --- the views' entry points -------------------------------------------------------------------------


def idempotent_response(
    request: Request, *, endpoint: str, resources: Resources, run: Callable[[], Response]
) -> Response:
    """`run()`'s response; with an Idempotency-Key, the first one's for a repeat (no second run)."""
    key = idempotency_key(request)
    if key is None:
        return run()
    outcome = idempotency_claim(
        scope=idempotency_scope(request, endpoint=endpoint, resources=resources),
        key=key,
        request_hash=request_hash(request),
    )
    if isinstance(outcome, Replay):
        return Response(outcome.response, status=outcome.status_code, headers={REPLAYED_HEADER: "true"})
    try:
        response = run()
    except BaseException:
        idempotency_release(outcome)
        raise
    idempotency_settle(outcome, status_code=response.status_code, data=response.data)
    return response


def idempotent_stream(
    request: Request,
    *,
    endpoint: str,
    resources: Resources,
    run: Callable[[Callable[[Any], dict[str, Any]], list[Any]], StreamingHttpResponse],
    render_result: Callable[[Any], dict[str, Any]],
) -> StreamingHttpResponse:
    """`run(render_result, result_box)`'s event stream; with an Idempotency-Key, a repeat gets the
    first turn's result as an equivalent stream. The result is kept once the turn has saved (its
    terminal event, `finish` or `tripwire`, was rendered, or the turn put its result in `result_box`
    before its client went away); a stream whose turn saved nothing releases the key."""
    key = idempotency_key(request)
    if key is None:
        return run(render_result, [])
    outcome = idempotency_claim(
        scope=idempotency_scope(request, endpoint=endpoint, resources=resources),
        key=key,
        request_hash=request_hash(request),
    )
    if isinstance(outcome, Replay):
        frames = replay_frames(outcome.response)
        response = sse_response(_async_iter(frames) if is_asgi(request) else frames)
        response[REPLAYED_HEADER] = "true"
        return response
    results: list[dict[str, Any]] = []
    saved: list[Any] = []

    def render(result: Any) -> dict[str, Any]:
        data = render_result(result)
        results.append(data)
        return data

    try:
        response = run(render, saved)
    except BaseException:
        idempotency_release(outcome)
        raise
    settle = partial(_settle_stream, outcome, results, saved, render_result)
    content = response.streaming_content
    if response.is_async:
        response.streaming_content = _settled_async(content, settle)
    else:
        response.streaming_content = _settled(content, settle)
    return response


def _settle_stream(
    claim: Claim,
    results: list[dict[str, Any]],
    saved: list[Any],
    render_result: Callable[[Any], dict[str, Any]],
) -> None:
    if results:
        idempotency_settle(claim, status_code=status.HTTP_200_OK, data=results[-1])
    elif saved:  # the client went away after the save: a retry must replay it, not run it again
        idempotency_settle(claim, status_code=status.HTTP_200_OK, data=render_result(saved[-1]))
    else:
        idempotency_release(claim)


def _settled(frames: Iterator[bytes], settle: Callable[[], None]) -> Iterator[bytes]:
    try:
        yield from frames
    finally:
        settle()


async def _settled_async(frames: AsyncIterator[bytes], settle: Callable[[], None]) -> AsyncIterator[bytes]:
    try:
        async for chunk in frames:
            yield chunk
    finally:
        await in_thread(settle)  # the ORM never runs on the event loop


async def _async_iter(frames: Iterator[bytes]) -> AsyncIterator[bytes]:
    for chunk in frames:
        yield chunk


def replay_frames(result: dict[str, Any]) -> Iterator[bytes]:
    """A finished turn's stream, rebuilt from its result: per saved response message, its text as one
    `text-delta` and its tool calls and results, then the same terminal event (`finish`, or
    `tripwire` for a blocked turn) with the same data as the first time."""
    if result.get("tripwire"):
        yield frame("tripwire", result)
        return
    for message in result.get("messages") or []:
        if message.get("role") not in ("assistant", "tool"):
            continue
        for part in message.get("parts") or []:
            kind = part.get("type")
            if kind == "text" and part.get("text"):
                yield frame("text-delta", {"text": part["text"]})
            elif kind == "tool-call":
                yield frame(
                    "tool-call",
                    {"id": part.get("tool_call_id"), "name": part.get("tool_name"), "args": part.get("args")},
                )
            elif kind == "tool-result":
                yield frame("tool-result", part)
    yield frame("finish", result)


# --- keys, scopes, request hashes ----------------------------------------------------------------------


def idempotency_key(request: Request) -> str | None:
    """The request's key, or None without the header; a malformed one is a 400."""
    key = request.META.get("HTTP_IDEMPOTENCY_KEY")
    if key is None:
        return None
    if not _KEY.fullmatch(key):
        raise IdempotencyKeyInvalid()
    return key


def idempotency_scope(request: Request, *, endpoint: str, resources: Resources) -> str:
    """Whose key it is: the endpoint and the caller (the user; else the resources the resolver grants
    an anonymous caller). Hashed when longer than the column."""
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated:
        caller = f"user:{user.pk}"
    else:
        allowed = resources()
        caller = "resources:" + ("*" if allowed is None else ",".join(sorted(allowed)))
    scope = f"{endpoint} {caller}"
    if len(scope) > MAX_SCOPE_LENGTH:
        scope = "sha256:" + hashlib.sha256(scope.encode()).hexdigest()
    return scope


def request_hash(request: Request) -> str:
    """SHA-256 of the parsed body: JSON canonically (key order and spacing do not matter); a form's
    fields as sent and its files by name, type, size and content."""
    data = request.data
    if hasattr(data, "lists"):  # a form (QueryDict): several values per name, files among them
        body: Any = {
            name: [_file_digest(v) if isinstance(v, UploadedFile) else v for v in values]
            for name, values in data.lists()
        }
    else:
        body = data
    canonical = json.dumps(body, cls=JSONEncoder, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _file_digest(upload: UploadedFile) -> dict[str, Any]:
    digest = hashlib.sha256()
    for chunk in upload.chunks():  # from the start, whatever read it before
        digest.update(chunk)
    upload.seek(0)
    return {
        "name": upload.name,
        "content_type": upload.content_type,
        "size": upload.size,
        "sha256": digest.hexdigest(),
    }


# --- the records ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Claim:
    """This request runs the turn; `record_id` is its running record."""

    record_id: int


@dataclass(frozen=True, slots=True)
class Replay:
    """A finished first request's answer."""

    status_code: int
    response: Any


def idempotency_claim(*, scope: str, key: str, request_hash: str) -> Claim | Replay:
    """Claims `key` for this request, or answers what its first request did: a Replay of a finished
    one with the same body; 422 for another body; 409 while it runs. An expired record is replaced,
    and so is the claim of a first request whose process died (see `_claim_abandoned`)."""
    owner = this_process()
    for _ in range(3):
        now = timezone.now()
        try:
            with transaction.atomic(using=memproc_db()):
                record = IdempotencyRecord.objects.create(
                    scope=scope,
                    key=key,
                    request_hash=request_hash,
                    owner_host=owner.host,
                    owner_pid=owner.pid,
                    owner_started=owner.started,
                    created_at=now,
                    expires_at=now + timedelta(seconds=memproc_settings.IDEMPOTENCY_TTL),
                )
            return Claim(record.pk)
        except IntegrityError:
            pass  # the key is taken: by whom, and for what, is read below
        first = IdempotencyRecord.objects.filter(scope=scope, key=key).first()
        if first is None:
            continue  # released meanwhile
        if first.expires_at <= now:
            IdempotencyRecord.objects.filter(pk=first.pk, expires_at__lte=now).delete()
            continue
        if first.state != IdempotencyRecord.State.DONE and _claim_abandoned(first, now=now):
            # Its process died mid-turn (a settle or release always follows a live one): take over,
            # rather than answer 409 until the key expires.
            IdempotencyRecord.objects.filter(
                pk=first.pk, state=IdempotencyRecord.State.RUNNING, created_at=first.created_at
            ).delete()
            continue
        if first.request_hash != request_hash:
            raise IdempotencyKeyReused()
        if first.state != IdempotencyRecord.State.DONE:
            raise IdempotencyKeyInProgress()
        return Replay(status_code=first.status_code or status.HTTP_200_OK, response=first.response)
    raise IdempotencyKeyInProgress()  # the key changed hands under us each time: let the client retry


def _claim_abandoned(record: IdempotencyRecord, *, now: datetime) -> bool:
    """A running claim whose process is gone from this host, or older than the lease (an owner on
    another host, or one recorded before claims named their owner)."""
    if record.created_at <= now - timedelta(seconds=memproc_settings.IDEMPOTENCY_LEASE):
        return True
    return owner_is_gone(ClaimOwner(record.owner_host, record.owner_pid, record.owner_started))


def idempotency_settle(claim: Claim, *, status_code: int, data: Any) -> None:
    """Keeps a successful answer for repeats, with the resource and thread the turn's result names
    (a purge of the one, a delete of the other, takes it); any other answer releases the key."""
    if status_code >= 400:
        idempotency_release(claim)
        return
    # Stored as the client received it (dates as strings, and so on), so a replay renders the same.
    stored = json.loads(json.dumps(data, cls=JSONEncoder))
    names = stored if isinstance(stored, dict) else {}
    try:
        IdempotencyRecord.objects.filter(pk=claim.record_id).update(
            state=IdempotencyRecord.State.DONE,
            status_code=status_code,
            response=stored,
            resource_id=str(names.get("resource_id") or "")[:MAX_ID_LENGTH],
            thread_id=str(names.get("thread_id") or "")[:MAX_ID_LENGTH],
        )
    except DatabaseError as exc:
        # The turn is saved and answered; its repeats answer 409 until the record expires.
        logs.failure(logger, "memproc: could not keep the answer of an Idempotency-Key", exc=exc)


def idempotency_release(claim: Claim) -> None:
    """Forgets a claim whose turn saved nothing, so the same key may run it again."""
    try:
        IdempotencyRecord.objects.filter(pk=claim.record_id).delete()
    except DatabaseError as exc:
        logs.failure(
            logger, "memproc: could not release an Idempotency-Key; it stays taken until it expires", exc=exc
        )
