"""Reading an OpenAI-compatible stream: text deltas as they arrive, each tool call once, complete.

A stream that ends without a finish reason is an error, never a short answer: a dropped connection
can look like a normal end, and a truncated answer must not be saved.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from memproc.events import StreamEvent
from memproc.exceptions import ModelResponseError, ModelUnavailableError
from memproc.llm.openai_reply import field, optional_text, reply_object, tool_call, usage


class StreamState:
    """What a stream has said so far: usage, the finish reason, tool-call fragments."""

    def __init__(self, model_id: str, stream: Any = None) -> None:
        self.model_id = model_id
        self.calls = ToolCallAssembler()
        self.usage: dict[str, Any] = {}
        self.finish_reason: str | None = None
        self.chunks = 0
        self.content_type = _content_type(stream)

    def feed(self, chunk: Any) -> list[StreamEvent]:
        self.chunks += 1
        chunk = reply_object(chunk, "a stream chunk")
        events: list[StreamEvent] = []
        chunk_usage = field(chunk, "usage")
        if chunk_usage is not None:
            self.usage = usage(chunk_usage)
        choices = field(chunk, "choices")
        if choices is not None and not isinstance(choices, list):
            raise ModelResponseError(f"{self.model_id} sent a stream chunk whose choices are not a list")
        for choice in choices or ():
            choice = reply_object(choice, "a stream chunk's choice")
            delta = field(choice, "delta")
            if delta is not None:
                delta = reply_object(delta, "a stream chunk's delta")
                content = optional_text(field(delta, "content"), "delta.content")
                if content:
                    events.append(StreamEvent(type="text-delta", text=content))
                fragments = field(delta, "tool_calls")
                if fragments is not None and not isinstance(fragments, list):
                    raise ModelResponseError(f"{self.model_id} sent delta.tool_calls that is not a list")
                for fragment in fragments or ():
                    self.calls.add(reply_object(fragment, "a tool-call fragment"))
            finish_reason = optional_text(field(choice, "finish_reason"), "finish_reason")
            if finish_reason:
                self.finish_reason = finish_reason
                events.extend(self._tool_call_events())
        return events

    def finish(self) -> StreamEvent:
        if self.finish_reason is None:
            if not self.chunks and self.content_type and "event-stream" not in self.content_type:
                # Not a stream at all: an HTML error page, or a JSON answer to a streamed request.
                raise ModelResponseError(
                    f"{self.model_id} answered a streamed request with {self.content_type!r}, not events"
                )
            # A dropped connection can look like a normal end; a truncated answer must not be saved.
            raise ModelUnavailableError(
                f"{self.model_id}: the stream ended before the model finished its answer"
            )
        return StreamEvent(type="finish", usage=self.usage, finish_reason=self.finish_reason)

    def _tool_call_events(self) -> Iterator[StreamEvent]:
        for index, (call_id, name, arguments) in self.calls.drain():
            call = tool_call(self.model_id, call_id, name, arguments, index)
            yield StreamEvent(type="tool-call", tool_call=call)


class ToolCallAssembler:
    """Joins streamed tool-call fragments: the id and name come first, arguments arrive in pieces."""

    def __init__(self) -> None:
        self._calls: dict[int, list[Any]] = {}

    def add(self, fragment: Any) -> None:
        index = field(fragment, "index")
        if index is None:
            index = len(self._calls)
        elif isinstance(index, bool) or not isinstance(index, int):
            raise ModelResponseError(f"a tool-call fragment has an index that is not an integer: {index!r}")
        call = self._calls.setdefault(index, [None, None, ""])
        call_id = optional_text(field(fragment, "id"), "tool call id")
        if call_id:
            call[0] = call_id
        function = field(fragment, "function")
        if function is not None:
            function = reply_object(function, "a tool-call fragment's function")
            name = optional_text(field(function, "name"), "tool call name")
            arguments = optional_text(field(function, "arguments"), "tool call arguments")
            if name and call[1] is None:
                call[1] = name
            if arguments:
                call[2] += arguments

    def drain(self) -> list[tuple[int, tuple[str | None, str | None, str]]]:
        calls = sorted((index, tuple(call)) for index, call in self._calls.items())
        self._calls.clear()
        return calls  # type: ignore[return-value]


def _content_type(stream: Any) -> str:
    response = getattr(stream, "response", None)
    headers = getattr(response, "headers", None)
    try:
        return str(headers.get("content-type") or "") if headers is not None else ""
    except Exception:  # a test double or an unusual transport: no content type to go by
        return ""
