"""Server-Sent Events: a turn's stream events as `event: <type>` / `data: <json>` frames.

A `finish` or `tripwire` event ends the stream. An error mid-turn becomes one `error` event; the turn
saves only at its end, so an error (or a client that goes away) leaves nothing half-saved.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Any, Protocol

from django.http import StreamingHttpResponse
from rest_framework.utils.encoders import JSONEncoder

from memproc import logs
from memproc.api.errors import memproc_status
from memproc.events import StreamEvent
from memproc.exceptions import MemprocError
from memproc.messages import part_to_json, thaw

logger = logging.getLogger(__name__)

CONTENT_TYPE = "text/event-stream"
FINAL_EVENTS = frozenset({"finish", "tripwire", "suspended"})


def frame(event: str, data: Any) -> bytes:
    """One SSE frame. JSON never contains a raw newline, so `data` is always one line."""
    payload = json.dumps(data, cls=JSONEncoder, ensure_ascii=False, separators=(",", ":"))
    return f"event: {event}\ndata: {payload}\n\n".encode()


def event_data(event: StreamEvent, render_result: Callable[[Any], dict[str, Any]]) -> dict[str, Any]:
    """The `data` of one event: text deltas, tool calls and results, or the turn's result."""
    if event.type == "text-delta":
        return {"text": event.text}
    if event.type == "tool-call" and event.tool_call is not None:
        call = event.tool_call
        return {"id": call.id, "name": call.name, "args": thaw(call.args)}
    if event.type == "tool-result" and event.tool_result is not None:
        return part_to_json(event.tool_result)
    if event.type == "tool-approval" and event.pending is not None:
        return {"pending": event.pending.as_dict()}
    if event.result is not None:
        return render_result(event.result)
    if event.type in ("tripwire", "retry") and event.tripwire is not None:
        return {"tripwire": event.tripwire.as_dict()}
    return {}


def error_data(exc: BaseException) -> dict[str, str]:
    """`{"detail", "code"}` for an error mid-stream; internals of unexpected errors stay in the log."""
    if isinstance(exc, MemprocError):
        _, body = memproc_status(exc)
        detail = body.get("detail") or "; ".join(body.get("non_field_errors", [])) or str(exc)
        return {"detail": detail, "code": body.get("code", exc.code)}
    return {"detail": "The turn failed unexpectedly; nothing was saved.", "code": "server_error"}


class Encoder(Protocol):
    """Turns a turn's stream events into one protocol's frames (SSE here, the OpenAI and AI SDK
    protocols in `memproc.api.protocols`)."""

    def begin(self) -> list[bytes]: ...

    def event(self, event: StreamEvent) -> list[bytes]: ...

    def error(self, exc: BaseException) -> list[bytes]: ...

    def end(self) -> list[bytes]: ...


class SSEEncoder:
    """memproc's own SSE: one `event: <type>` frame per event, one `error` frame for a failure."""

    def __init__(self, render_result: Callable[[Any], dict[str, Any]]) -> None:
        self.render_result = render_result

    def begin(self) -> list[bytes]:
        return []

    def event(self, event: StreamEvent) -> list[bytes]:
        return [frame(event.type, event_data(event, self.render_result))]

    def error(self, exc: BaseException) -> list[bytes]:
        return [frame("error", error_data(exc))]

    def end(self) -> list[bytes]:
        return []


def encoded(events: Iterator[StreamEvent], encoder: Encoder) -> Iterator[bytes]:
    """`events` as frames, ending after `finish` or `tripwire`, or with the encoder's error frames. A
    client that goes away closes `events`, which stops the turn before it saves."""
    yield from _joined(encoder.begin())
    try:
        for event in events:
            yield from _joined(encoder.event(event))
            if event.type in FINAL_EVENTS:
                break
    except Exception as exc:
        _log(exc)
        yield from _joined(encoder.error(exc))
    finally:
        close = getattr(events, "close", None)
        if close is not None:
            close()
    yield from _joined(encoder.end())


async def aencoded(events: AsyncIterator[StreamEvent], encoder: Encoder) -> AsyncIterator[bytes]:
    """`encoded` for an async stream (ASGI): Django sends each frame as soon as it is yielded."""
    for chunk in _joined(encoder.begin()):
        yield chunk
    try:
        async for event in events:
            for chunk in _joined(encoder.event(event)):
                yield chunk
            if event.type in FINAL_EVENTS:
                break
    except Exception as exc:
        _log(exc)
        for chunk in _joined(encoder.error(exc)):
            yield chunk
    finally:
        aclose = getattr(events, "aclose", None)
        if aclose is not None:
            await aclose()
    for chunk in _joined(encoder.end()):
        yield chunk


def _joined(frames: list[bytes]) -> list[bytes]:
    """One chunk for an event's frames, none for no frames."""
    return [b"".join(frames)] if frames else []


def _log(exc: BaseException) -> None:
    if not isinstance(exc, MemprocError):
        logs.failure(logger, "memproc: a streamed turn failed", exc=exc)


def sse_response(
    frames: Iterator[bytes] | AsyncIterator[bytes], headers: Mapping[str, str] | None = None
) -> StreamingHttpResponse:
    response = StreamingHttpResponse(frames, content_type=f"{CONTENT_TYPE}; charset=utf-8")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx: do not buffer the frames
    for name, value in (headers or {}).items():
        response[name] = value
    return response


def stream_response(
    events: Iterator[StreamEvent] | AsyncIterator[StreamEvent],
    encoder: Encoder,
    headers: Mapping[str, str] | None = None,
) -> StreamingHttpResponse:
    """A turn's events through `encoder` as a streaming response: async when `events` is (ASGI)."""
    if hasattr(events, "__anext__"):
        return sse_response(aencoded(events, encoder), headers)  # type: ignore[arg-type]
    return sse_response(encoded(events, encoder), headers)  # type: ignore[arg-type]
