"""What the loopback server answers: scripted or echoed chat completions, their stream chunks, and
deterministic embeddings.
"""

from __future__ import annotations

import base64
import json
import math
import re
import struct
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memproc.testing.openai_server import OpenAICompatibleServer

Reply = str | Mapping[str, Any]


@dataclass
class Completion:
    content: str = ""
    tool_calls: list[dict[str, str]] = field(default_factory=list)  # {"id", "name", "arguments"}
    finish_reason: str = "stop"
    chunk_delay: float = 0.0  # seconds between stream chunks
    disconnect_after: int | None = None  # stream chunks sent before hanging up without [DONE]


def is_error(reply: Reply | None) -> bool:
    return isinstance(reply, Mapping) and "status" in reply


def delay_of(reply: Reply | None) -> float:
    return float(reply.get("delay") or 0) if isinstance(reply, Mapping) else 0.0


def completion_for(reply: Reply | None, body: dict[str, Any], owner: OpenAICompatibleServer) -> Completion:
    if reply is None:
        return Completion(content=f"Echo: {_last_user_text(body)}", chunk_delay=owner.chunk_delay)
    if isinstance(reply, str):
        return Completion(content=reply)
    calls = [
        {
            "id": str(call.get("id") or owner._new_id("call")),
            "name": str(call["name"]),
            "arguments": call.get("arguments")
            if isinstance(call.get("arguments"), str)
            else json.dumps(call.get("arguments") or {}),
        }
        for call in reply.get("tool_calls") or ()
    ]
    content = str(reply.get("content") or reply.get("text") or "")
    finish = reply.get("finish_reason") or ("tool_calls" if calls else "stop")
    disconnect = reply.get("disconnect_after")
    return Completion(
        content=content,
        tool_calls=calls,
        finish_reason=str(finish),
        chunk_delay=float(reply.get("chunk_delay") or 0),
        disconnect_after=int(disconnect) if disconnect is not None else None,
    )


def _last_user_text(body: dict[str, Any]) -> str:
    for message in reversed(body.get("messages") or []):
        if isinstance(message, dict) and message.get("role") == "user":
            return _content_text(message.get("content"))
    return ""


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text"
        )
    return ""


def _words(text: str) -> int:
    return len(text.split())


def prompt_tokens(body: dict[str, Any]) -> int:
    """The request's size as the server counts it: one token per word of the messages' text."""
    return sum(
        _words(_content_text(m.get("content"))) for m in body.get("messages") or [] if isinstance(m, dict)
    )


def context_length_error(limit: int, requested: int) -> dict[str, Any]:
    """The `error` OpenAI answers (HTTP 400) to a request longer than the model's context window."""
    return {
        "message": (
            f"This model's maximum context length is {limit} tokens. However, your messages resulted "
            f"in {requested} tokens. Please reduce the length of the messages."
        ),
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }


def completion_usage(body: dict[str, Any], completion: Completion) -> dict[str, int]:
    prompt = prompt_tokens(body)
    answer = _words(completion.content) + sum(_words(c["arguments"]) for c in completion.tool_calls)
    return {"prompt_tokens": prompt, "completion_tokens": answer, "total_tokens": prompt + answer}


def stream_chunks(
    completion: Completion, model: str, completion_id: str, usage: dict[str, int] | None
) -> Iterator[dict[str, Any]]:
    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        return {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        }

    yield chunk({"role": "assistant", "content": ""})
    for word in re.findall(r"\S+\s*|\s+", completion.content):
        yield chunk({"content": word})
    for index, call in enumerate(completion.tool_calls):
        head = {"index": index, "id": call["id"], "type": "function"}
        yield chunk({"tool_calls": [{**head, "function": {"name": call["name"], "arguments": ""}}]})
        for fragment in _fragments(call["arguments"], 3):
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]})
    yield chunk({}, completion.finish_reason)
    if usage is not None:
        yield {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
            "choices": [],
            "usage": usage,
        }


def _fragments(text: str, parts: int) -> list[str]:
    size = max(1, math.ceil(len(text) / parts))
    return [text[i : i + size] for i in range(0, len(text), size)]


# --- embeddings -----------------------------------------------------------------------------------


def is_token_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, int) for v in value)


def as_text(value: Any) -> str:
    return value if isinstance(value, str) else " ".join(str(v) for v in value)


def embed(text: str, dimensions: int) -> list[float]:
    # The benchmark's embedder (and memproc.testing.HashEmbedder): FNV-1a-32 per word, +1 below 2**31.
    counts = [0] * dimensions
    for token in re.findall(r"[a-z0-9]+", text.lower()):
        value = 0x811C9DC5
        for byte in token.encode():
            value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
        counts[value % dimensions] += 1 if value < 2**31 else -1
    norm = math.sqrt(sum(c * c for c in counts))
    if norm == 0:
        return [1.0] + [0.0] * (dimensions - 1)
    return [c / norm for c in counts]


def b64(vector: list[float]) -> str:
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")
