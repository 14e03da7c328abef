"""The loopback OpenAI-compatible test server itself: wire format, embeddings, auth, other processes."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import openai
import pytest

from memproc.testing.openai_server import OpenAICompatibleServer

ROOT = Path(__file__).resolve().parents[2]


def post(url: str, body: dict, *, key: str | None = "test-key") -> tuple[int, bytes]:
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def sse_chunks(raw: bytes) -> list[dict | str]:
    events = [line[len("data: ") :] for line in raw.decode().split("\n\n") if line.startswith("data: ")]
    return [e if e == "[DONE]" else json.loads(e) for e in events]


def test_base_url_points_at_v1_on_loopback(server):
    assert server.base_url == f"http://127.0.0.1:{server.port}/v1"
    assert server.port > 0


def test_stream_sends_arguments_in_fragments_usage_last_then_done(server):
    server.enqueue(
        {"tool_calls": [{"id": "c1", "name": "lookup", "arguments": {"query": "memory processors"}}]}
    )
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": True}

    status, raw = post(
        f"{server.base_url}/chat/completions", {**body, "stream_options": {"include_usage": True}}
    )

    chunks = sse_chunks(raw)
    assert status == 200
    assert chunks[-1] == "[DONE]"
    fragments = [
        call["function"]["arguments"]
        for chunk in chunks[:-1]
        for choice in chunk["choices"]
        for call in choice["delta"].get("tool_calls", ())
        if call["function"].get("arguments")
    ]
    assert len(fragments) >= 3
    assert json.loads("".join(fragments)) == {"query": "memory processors"}
    assert chunks[-2]["choices"] == []
    assert chunks[-2]["usage"]["total_tokens"] > 0


def test_stream_without_include_usage_sends_no_usage_chunk(server):
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}

    chunks = sse_chunks(post(f"{server.base_url}/chat/completions", body)[1])

    assert all("usage" not in c for c in chunks[:-1])


def test_wrong_or_missing_bearer_token_gets_401(server):
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}

    assert post(f"{server.base_url}/chat/completions", body, key="nope")[0] == 401
    assert post(f"{server.base_url}/chat/completions", body, key=None)[0] == 401
    assert post(f"{server.base_url}/chat/completions", body)[0] == 200


def test_unknown_route_is_a_404(server):
    assert post(f"{server.base_url}/completions", {})[0] == 404


def test_replies_are_served_in_order_then_echo(server):
    server.enqueue("first")
    server.enqueue({"content": "second"})
    client = openai.OpenAI(base_url=server.base_url, api_key="test-key", max_retries=0)

    def ask() -> str | None:
        completion = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "third"}]
        )
        return completion.choices[0].message.content

    assert [ask(), ask(), ask()] == ["first", "second", "Echo: third"]


def test_records_every_request_body_from_many_threads(server):
    def send(i: int) -> None:
        post(
            f"{server.base_url}/chat/completions",
            {"model": "m", "messages": [{"role": "user", "content": str(i)}]},
        )

    threads = [threading.Thread(target=send, args=(i,)) for i in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(int(r["messages"][0]["content"]) for r in server.requests) == list(range(12))
    server.reset()
    assert server.requests == []


def test_embeddings_are_deterministic_normalised_and_sized(server):
    client = openai.OpenAI(base_url=server.base_url, api_key="test-key", max_retries=0)

    first = client.embeddings.create(model="e", input=["hello world", "goodbye"]).data
    again = client.embeddings.create(model="e", input="hello world").data
    wide = client.embeddings.create(model="e", input="hello world", dimensions=32).data

    assert len(first) == 2 and len(first[0].embedding) == 8
    assert again[0].embedding == pytest.approx(first[0].embedding)
    assert first[0].embedding != first[1].embedding
    assert math.sqrt(sum(v * v for v in first[0].embedding)) == pytest.approx(1.0)
    assert len(wide[0].embedding) == 32
    assert server.requests[0]["input"] == ["hello world", "goodbye"]


def test_embeddings_in_float_format(server):
    status, raw = post(
        f"{server.base_url}/embeddings", {"model": "e", "input": "abc", "encoding_format": "float"}
    )

    data = json.loads(raw)["data"]
    assert status == 200
    assert isinstance(data[0]["embedding"], list) and len(data[0]["embedding"]) == 8


def test_embedding_errors_can_be_scripted():
    with OpenAICompatibleServer(dimensions=4) as srv:
        srv.enqueue({"status": 503, "message": "warming up"}, endpoint="embeddings")
        client = openai.OpenAI(base_url=srv.base_url, api_key="x", max_retries=0)

        with pytest.raises(openai.InternalServerError, match="warming up"):
            client.embeddings.create(model="e", input="a")
        assert len(client.embeddings.create(model="e", input="a").data[0].embedding) == 4


def test_bad_options_are_rejected():
    with pytest.raises(ValueError):
        OpenAICompatibleServer(dimensions=0)
    with pytest.raises(ValueError):
        OpenAICompatibleServer(delay=-1)
    with pytest.raises(ValueError):
        OpenAICompatibleServer().enqueue("x", endpoint="images")


def test_usable_from_another_process(server):
    server.enqueue("from the parent's script")
    code = (
        "import json, sys, urllib.request\n"
        "req = urllib.request.Request(sys.argv[1] + '/chat/completions', method='POST',\n"
        "    data=json.dumps({'model': 'm', 'messages': [{'role': 'user', 'content': 'hi'}]}).encode(),\n"
        "    headers={'Content-Type': 'application/json', 'Authorization': 'Bearer test-key'})\n"
        "print(json.load(urllib.request.urlopen(req, timeout=10))['choices'][0]['message']['content'])\n"
    )

    out = subprocess.run(
        [sys.executable, "-c", code, server.base_url], capture_output=True, text=True, timeout=30
    )

    assert out.stdout.strip() == "from the parent's script"
    assert server.requests[-1]["messages"] == [{"role": "user", "content": "hi"}]


def test_runs_as_a_standalone_process():
    process = subprocess.Popen(
        [sys.executable, "-m", "memproc.testing.openai_server", "--port", "0"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        base_url = process.stdout.readline().strip()
        status, raw = post(
            f"{base_url}/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "yo"}]}
        )
        assert status == 200
        assert json.loads(raw)["choices"][0]["message"]["content"] == "Echo: yo"
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_embeddings_match_the_hash_embedder(server):
    from memproc.testing.embedders import HashEmbedder

    client = openai.OpenAI(base_url=server.base_url, api_key="test-key", max_retries=0)
    texts = ["How do I reset my password?", "", "password reset"]

    remote = [d.embedding for d in client.embeddings.create(model="e", input=texts, dimensions=64).data]

    for got, expected in zip(remote, HashEmbedder(dimensions=64).embed(texts), strict=True):
        assert got == pytest.approx(expected, abs=1e-6)
