"""A floor for the benchmark (`--endpoint baseline`): the same SSE stream from the same model through
the same SDK, from a plain async Django view with no DRF, no authentication, no database and no
memproc. What a turn costs above it is what DRF, auth, the database and memproc add."""

import asyncio
import json
import os
from collections.abc import AsyncIterator
from typing import Any

from django.http import HttpRequest, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt

_clients: dict[asyncio.AbstractEventLoop, Any] = {}


def client() -> Any:
    """One AsyncOpenAI client per event loop, as memproc's adapter keeps."""
    import openai

    loop = asyncio.get_running_loop()
    if loop not in _clients:
        _clients[loop] = openai.AsyncOpenAI(base_url=os.environ["BENCH_MODEL_URL"], api_key="bench")
    return _clients[loop]


@csrf_exempt
async def baseline_stream(request: HttpRequest) -> StreamingHttpResponse:
    text = json.loads(request.body)["messages"]
    stream = await client().chat.completions.create(
        model="bench-model",
        messages=[{"role": "user", "content": text}],
        stream=True,
        stream_options={"include_usage": True},
    )
    return StreamingHttpResponse(frames(stream), content_type="text/event-stream")


async def frames(stream: Any) -> AsyncIterator[bytes]:
    """`text-delta` per content chunk, then `finish` with the whole text: memproc's frame names."""
    answer = ""
    async for chunk in stream:
        for choice in chunk.choices:
            if choice.delta.content:
                answer += choice.delta.content
                yield sse("text-delta", {"text": choice.delta.content})
    yield sse("finish", {"text": answer})


def sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()
