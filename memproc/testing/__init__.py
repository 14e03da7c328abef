"""Helpers for testing agents built on memproc, shipped with the package for users' own tests."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from memproc.events import StreamEvent
from memproc.llm.types import ModelRequest, ModelResponse

__all__ = ["HashEmbedder", "OpenAICompatibleServer", "ScriptedModel"]

Script = str | ModelResponse | BaseException | Callable[[ModelRequest], ModelResponse | str]


class ScriptedModel:
    """Returns the given responses in order and records every ModelRequest in `.requests`.

    A response is a string, a ModelResponse (for tool calls), an exception to raise, or a callable
    that receives the request. Running out of responses raises AssertionError: a test that makes more
    model calls than it scripted should fail loudly.
    """

    def __init__(
        self, responses: Iterable[Script] = (), *, id: str = "test/scripted", chunk_words: bool = True
    ) -> None:
        self.id = id
        self._responses = list(responses)
        self.requests: list[ModelRequest] = []
        self.chunk_words = chunk_words
        self._lock = threading.Lock()

    def add(self, *responses: Script) -> None:
        with self._lock:
            self._responses.extend(responses)

    @property
    def calls(self) -> int:
        return len(self.requests)

    def generate(self, request: ModelRequest) -> ModelResponse:
        with self._lock:
            self.requests.append(request)
            if not self._responses:
                raise AssertionError(
                    f"ScriptedModel ran out of responses after {len(self.requests) - 1} calls"
                )
            script = self._responses.pop(0)
        if callable(script) and not isinstance(script, (ModelResponse, BaseException)):
            script = script(request)
        if isinstance(script, BaseException):
            raise script
        if isinstance(script, str):
            return ModelResponse(text=script, usage={"completion_tokens": len(script.split())})
        return script

    def stream(self, request: ModelRequest) -> Iterator[StreamEvent]:
        response = self.generate(request)
        if response.text:
            pieces = response.text.split(" ") if self.chunk_words else [response.text]
            for i, piece in enumerate(pieces):
                yield StreamEvent(type="text-delta", text=piece if i == 0 else " " + piece)
        for call in response.tool_calls:
            yield StreamEvent(type="tool-call", tool_call=call)
        yield StreamEvent(type="finish", usage=response.usage, finish_reason=response.finish_reason)


def __getattr__(name: str) -> Any:
    if name == "HashEmbedder":
        from memproc.testing.embedders import HashEmbedder

        return HashEmbedder
    if name == "OpenAICompatibleServer":
        from memproc.testing.openai_server import OpenAICompatibleServer

        return OpenAICompatibleServer
    raise AttributeError(name)
