"""OpenAIEmbedder against a real HTTP endpoint on loopback (stdlib server, no network)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest
from django.test import override_settings

from memproc.embedders import OpenAIEmbedder
from memproc.exceptions import ConfigurationError, EmbedderUnavailable, ValidationError

pytest.importorskip("openai")


class FakeEmbeddings:
    """What the endpoint answers: 4-d vectors from the text's length, or a scripted failure."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.fail_with: int | None = None
        self.delay = 0.0
        self.reverse = False

    def vector(self, text: str, size: int) -> list[float]:
        return [float(len(text) + 1), 1.0, 2.0, 3.0, 4.0, 5.0][:size]


class Handler(BaseHTTPRequestHandler):
    fake: FakeEmbeddings

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.fake.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), **body})
        if self.fake.delay:
            time.sleep(self.fake.delay)
        if self.fake.fail_with:
            self.reply(self.fake.fail_with, {"error": {"message": "scripted", "type": "test"}})
            return
        size = body.get("dimensions", 4)
        data = [
            {"object": "embedding", "index": i, "embedding": self.fake.vector(text, size)}
            for i, text in enumerate(body["input"])
        ]
        if self.fake.reverse:
            data.reverse()
        usage = {"prompt_tokens": 1, "total_tokens": 1}
        self.reply(200, {"object": "list", "data": data, "model": body["model"], "usage": usage})

    def reply(self, status: int, payload: dict) -> None:
        raw = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client timed out on purpose

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def server() -> Iterator[tuple[str, FakeEmbeddings]]:
    fake = FakeEmbeddings()
    handler = type("BoundHandler", (Handler,), {"fake": fake})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", fake
    httpd.shutdown()
    httpd.server_close()


def unit(vector: list[float]) -> list[float]:
    array = np.asarray(vector, dtype=np.float32)
    return (array / np.linalg.norm(array)).tolist()


def test_embeds_in_batches_in_order_and_normalised(server) -> None:
    base_url, fake = server
    embedder = OpenAIEmbedder(model="text-embedding-3-small", api_key="k", base_url=base_url, batch_size=2)
    fake.reverse = True  # the index field, not the list order, says which text a vector is for
    vectors = embedder.embed(["a", "bb", "ccc", "dddd", "eeeee"])
    assert vectors == [unit(fake.vector(t, 4)) for t in ["a", "bb", "ccc", "dddd", "eeeee"]]
    assert [len(r["input"]) for r in fake.requests] == [2, 2, 1]
    assert fake.requests[0]["path"] == "/v1/embeddings"
    assert fake.requests[0]["model"] == "text-embedding-3-small"
    assert fake.requests[0]["auth"] == "Bearer k"
    assert fake.requests[0]["encoding_format"] == "float"
    assert "dimensions" not in fake.requests[0]
    assert embedder.id == "openai/text-embedding-3-small"


def test_dimensions_are_learnt_from_the_first_response(server) -> None:
    base_url, fake = server
    embedder = OpenAIEmbedder(api_key="k", base_url=base_url)
    embedder.embed(["hello"])
    assert embedder.dimensions == 4
    assert len(fake.requests) == 1


def test_dimensions_asks_the_endpoint_when_nothing_was_embedded_yet(server) -> None:
    base_url, fake = server
    assert OpenAIEmbedder(api_key="k", base_url=base_url).dimensions == 4
    assert len(fake.requests) == 1


def test_requested_dimensions_are_sent_and_checked(server) -> None:
    base_url, fake = server
    embedder = OpenAIEmbedder(api_key="k", base_url=base_url, dimensions=3)
    assert embedder.dimensions == 3 and not fake.requests  # known without asking
    assert len(embedder.embed(["x"])[0]) == 3
    assert fake.requests[0]["dimensions"] == 3


def test_empty_texts_are_sent_as_a_space(server) -> None:
    base_url, fake = server
    OpenAIEmbedder(api_key="k", base_url=base_url).embed(["", "x"])
    assert fake.requests[0]["input"] == [" ", "x"]
    assert OpenAIEmbedder(api_key="k", base_url=base_url).embed([]) == []


def test_key_and_base_url_default_to_the_models_setting(server) -> None:
    base_url, fake = server
    models = {"openai": {"api_key": "from-settings", "base_url": base_url}}
    with override_settings(MEMPROC={"MODELS": models}):
        OpenAIEmbedder().embed(["x"])
    assert fake.requests[0]["auth"] == "Bearer from-settings"


@pytest.mark.parametrize("status", [429, 500, 502, 503])
def test_rate_limits_and_server_errors_are_transient(server, status: int) -> None:
    base_url, fake = server
    fake.fail_with = status
    with pytest.raises(EmbedderUnavailable):
        OpenAIEmbedder(api_key="k", base_url=base_url).embed(["x"])
    assert len(fake.requests) == 1  # no retries inside the SDK: the task queue retries


def test_a_refused_connection_is_transient() -> None:
    import socket

    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(EmbedderUnavailable):
        OpenAIEmbedder(api_key="k", base_url=f"http://127.0.0.1:{port}/v1").embed(["x"])


def test_a_timeout_is_transient(server) -> None:
    base_url, fake = server
    fake.delay = 0.5
    with pytest.raises(EmbedderUnavailable):
        OpenAIEmbedder(api_key="k", base_url=base_url, timeout=0.1).embed(["x"])


def test_bad_key_and_bad_request_are_not_retried(server) -> None:
    base_url, fake = server
    fake.fail_with = 401
    with pytest.raises(ConfigurationError):
        OpenAIEmbedder(api_key="bad", base_url=base_url).embed(["x"])
    fake.fail_with = 400
    with pytest.raises(ValidationError):
        OpenAIEmbedder(api_key="k", base_url=base_url).embed(["x"])


def test_missing_key_is_a_configuration_error(monkeypatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ConfigurationError):
        OpenAIEmbedder(base_url="http://127.0.0.1:9/v1").embed(["x"])


def test_options_are_validated() -> None:
    for options in ({"model": ""}, {"dimensions": 0}, {"batch_size": 0}, {"timeout": 0}):
        with pytest.raises(ConfigurationError):
            OpenAIEmbedder(**options)
