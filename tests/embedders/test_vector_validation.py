"""Issue 16, item 4: one bad embedder reply must not poison a text for good.

A NaN/inf, wrong-size, all-zero or missing vector is an embedder error (`EmbedderUnavailable`, which
the background tasks retry): it is never remembered (the same text is sent to the embedder again),
never written to `MessageEmbedding`, and never read back from it. The same text embeds and recalls
normally once the embedder answers properly again, without a restart.
"""

from __future__ import annotations

import json
import logging
import math
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from memproc import Memory
from memproc.embedders import OpenAIEmbedder, content_hash, vector_problem
from memproc.exceptions import EmbedderUnavailable
from memproc.messages import Message
from memproc.models import MessageEmbedding, message_key
from memproc.services.recall import EmbeddingSource, query_embed, sources_embed, sources_for
from memproc.testing import HashEmbedder
from memproc.testing.openai_server import OpenAICompatibleServer
from memproc.vectors import EmbeddingRow, NumpyVectorStore

DIMS = 8
R = "user-1"

# What a misbehaving embedder answers for one text of an 8-d embedder.
BAD_VECTORS: dict[str, Callable[[], list[float]]] = {
    "nan": lambda: [math.nan] + [0.5] * (DIMS - 1),
    "inf": lambda: [math.inf] + [0.5] * (DIMS - 1),
    "-inf": lambda: [0.5] * (DIMS - 1) + [-math.inf],
    "too short": lambda: [0.5] * (DIMS - 1),
    "too long": lambda: [0.5] * (DIMS + 1),
    "all zeros": lambda: [0.0] * DIMS,
    "empty": lambda: [],
    "overflows float32": lambda: [1e39] + [0.5] * (DIMS - 1),
}


class SometimesBad:
    """A HashEmbedder (8-d) that, while `broken`, answers `bad()` instead of each vector."""

    def __init__(self, bad: Callable[[], object]) -> None:
        self.inner = HashEmbedder(dimensions=DIMS)
        self.id = "sometimes-bad-8"
        self.dimensions = DIMS
        self.bad = bad
        self.broken = True
        self.calls: list[list[str]] = []

    def embed(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        if self.broken:
            return [self.bad() for _ in texts]  # type: ignore[misc]
        return self.inner.embed(texts)


class TooFewVectors(SometimesBad):
    def embed(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        return self.inner.embed(texts)[:-1] if self.broken else self.inner.embed(texts)


def asks_the_embedder(embedder: SometimesBad, text: str) -> bool:
    """Whether a recall query for `text` goes to the embedder."""
    calls = len(embedder.calls)
    query_embed(text, embedder)
    return len(embedder.calls) > calls


def saved_messages(texts: list[str], *, thread_id: str = "t1") -> list[Message]:
    messages = [Message.create("user", text) for text in texts]
    return Memory().save_messages(messages, thread_id=thread_id, resource_id=R, embed=False)


def sources(messages: list[Message], *, thread_id: str = "t1") -> list[EmbeddingSource]:
    return sources_for(messages, thread_id=thread_id, resource_id=R)


# --- the one check -------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(BAD_VECTORS))
def test_vector_problem_names_what_is_wrong(kind: str) -> None:
    assert vector_problem(BAD_VECTORS[kind](), DIMS) is not None


def test_vector_problem_accepts_a_good_vector() -> None:
    assert vector_problem(HashEmbedder(dimensions=DIMS).embed(["fine"])[0], DIMS) is None
    assert vector_problem([1e-3] * DIMS, DIMS) is None  # tiny, but has a direction


@pytest.mark.parametrize("bad", [None, "0.1,0.2", [[0.1] * DIMS], [None] * DIMS, ["x"] * DIMS, {"a": 1}])
def test_vector_problem_refuses_what_is_not_a_vector(bad: object) -> None:
    assert vector_problem(bad, DIMS) is not None


# --- query vectors -----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(BAD_VECTORS))
def test_a_bad_query_vector_is_an_embedder_error_and_is_not_cached(kind: str) -> None:
    embedder = SometimesBad(BAD_VECTORS[kind])
    with pytest.raises(EmbedderUnavailable, match=embedder.id):
        query_embed("where did I park the car", embedder)
    with pytest.raises(EmbedderUnavailable, match=embedder.id):  # asked again, not remembered
        query_embed("where did I park the car", embedder)
    assert embedder.calls == [["where did I park the car"]] * 2

    embedder.broken = False  # the embedder recovers: the same text embeds, no restart needed
    vector = query_embed("where did I park the car", embedder)
    expected = np.asarray(HashEmbedder(dimensions=DIMS).embed(["where did I park the car"])[0])
    np.testing.assert_allclose(vector, expected, rtol=1e-6)
    assert len(embedder.calls) == 3
    # Nor is a good one: the process keeps no vector of a user's text (it would outlive `forget`).
    assert asks_the_embedder(embedder, "where did I park the car")


def test_a_long_query_is_checked_too(settings) -> None:
    settings.MEMPROC = {**settings.MEMPROC, "EMBEDDING_CHUNK_CHARS": 20}
    embedder = SometimesBad(BAD_VECTORS["nan"])
    with pytest.raises(EmbedderUnavailable):
        query_embed("a question much longer than one chunk of twenty characters", embedder)


def test_a_reply_without_one_vector_per_text_is_an_embedder_error() -> None:
    embedder = TooFewVectors(BAD_VECTORS["nan"])
    with pytest.raises(EmbedderUnavailable, match="0 vectors for 1 text"):
        query_embed("hello", embedder)
    embedder.broken = False
    assert asks_the_embedder(embedder, "hello")


# --- stored vectors (MessageEmbedding) -----------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("kind", sorted(BAD_VECTORS))
def test_bad_vectors_are_never_stored_nor_cached(kind: str) -> None:
    messages = saved_messages(["I keep bees in the garden", "the hive is by the pear tree"])
    embedder = SometimesBad(BAD_VECTORS[kind])

    with pytest.raises(EmbedderUnavailable, match=embedder.id):
        sources_embed(sources=sources(messages), embedder=embedder)

    assert MessageEmbedding.objects.count() == 0
    embedder.broken = False  # a retry (Celery's, or the next backfill) now stores the right vectors
    assert sources_embed(sources=sources(messages), embedder=embedder) == 2
    assert embedder.calls[-1] == [m.text for m in messages]  # nothing of the bad reply was kept
    for row in MessageEmbedding.objects.all():
        assert vector_problem(row.vector, DIMS) is None


@pytest.mark.django_db
def test_one_bad_vector_in_a_batch_stores_nothing_of_that_batch() -> None:
    messages = saved_messages(["first good one", "second good one", "third is bad"])
    embedder = SometimesBad(lambda: None)
    inner = embedder.inner

    def embed(texts: list[str]) -> list[list[float]]:
        vectors = inner.embed(texts)
        vectors[-1] = [math.nan] * DIMS
        return vectors

    embedder.embed = embed  # type: ignore[method-assign]
    with pytest.raises(EmbedderUnavailable, match="vector 2 of 3"):
        sources_embed(sources=sources(messages), embedder=embedder)
    assert MessageEmbedding.objects.count() == 0
    del embedder.embed  # answers properly again (and logs its calls)
    embedder.broken = False
    # Not even the good vectors of a reply that cannot be trusted were kept: all are asked again.
    assert [asks_the_embedder(embedder, m.text) for m in messages] == [True, True, True]


@pytest.mark.django_db
def test_a_bad_vector_stored_before_the_fix_is_not_reused_for_the_same_text() -> None:
    """Rows poisoned by an earlier version: the content-hash lookup skips them and embeds again."""
    old, new = saved_messages(["the same words"]), saved_messages(["the same words"], thread_id="t2")
    embedder = SometimesBad(BAD_VECTORS["nan"])
    embedder.broken = False
    MessageEmbedding.objects.create(
        message_id=message_key(R, old[0].id),
        thread_id="t1",
        resource_id=R,
        model=embedder.id,
        dimensions=DIMS,
        content_hash=content_hash("the same words", embedder.id),
        vector=np.zeros(DIMS, dtype=np.float32),  # pgvector refuses NaN; a zero vector is as useless
    )
    sources_embed(sources=sources(new, thread_id="t2"), embedder=embedder)
    assert embedder.calls == [["the same words"]]  # embedded again, not copied from the poisoned row
    stored = MessageEmbedding.objects.get(message__public_id=new[0].id)
    assert vector_problem(stored.vector, DIMS) is None


@pytest.mark.django_db
@pytest.mark.parametrize("kind", ["nan", "all zeros", "inf"])
def test_the_store_refuses_a_bad_row_written_directly(kind: str) -> None:
    (message,) = saved_messages(["written by hand"])
    row = EmbeddingRow(
        message_id=message_key(R, message.id),
        thread_id="t1",
        resource_id=R,
        chunk=0,
        model="by-hand-8",
        dimensions=DIMS,
        content_hash="h",
        vector=BAD_VECTORS[kind](),
    )
    with pytest.raises(ValueError, match="by-hand-8"):
        NumpyVectorStore().store([row])
    assert MessageEmbedding.objects.count() == 0


# --- a turn (DESIGN rule 14: recall that fails is logged; the turn goes on without it) -----------


@pytest.mark.django_db
@pytest.mark.parametrize("kind", ["nan", "too short", "all zeros"])
def test_a_turn_with_a_bad_query_vector_goes_on_without_recall(
    kind: str, make_agent, model, caplog: pytest.LogCaptureFixture
) -> None:
    embedder = SometimesBad(BAD_VECTORS[kind])
    agent = make_agent(memory=Memory(last_messages=4, semantic_recall=True, embedder=embedder))
    model.add("Answered without recall", "Answered with recall")

    with caplog.at_level(logging.WARNING):
        result = agent.generate("Do you remember my bees?", thread_id="t1", resource_id=R)

    assert result.text == "Answered without recall" and result.tripwire is None
    assert "semantic recall failed; the turn goes on without it" in caplog.text
    # A back end that is down: its cause on the line, no traceback on every turn.
    assert "(EmbedderUnavailable: " in caplog.text and "Traceback" not in caplog.text
    assert MessageEmbedding.objects.count() == 0  # the after-commit embedding failed too: logged, dropped

    embedder.broken = False  # recovered: the very same text embeds and is stored
    calls = len(embedder.calls)
    result = agent.generate("Do you remember my bees?", thread_id="t1", resource_id=R)
    assert result.text == "Answered with recall"
    assert ["Do you remember my bees?"] in embedder.calls[calls:]  # asked again, not remembered
    assert MessageEmbedding.objects.filter(model=embedder.id).count() == 2
    for row in MessageEmbedding.objects.all():
        assert vector_problem(row.vector, DIMS) is None
    assert asks_the_embedder(embedder, "Do you remember my bees?")  # each query is embedded afresh


# --- the OpenAI-compatible adapter against a loopback server --------------------------------------


@pytest.fixture
def embeddings_server() -> Iterator[OpenAICompatibleServer]:
    pytest.importorskip("openai")
    with OpenAICompatibleServer(api_key="test-key", dimensions=DIMS) as server:
        yield server


@pytest.mark.parametrize("kind", sorted(BAD_VECTORS))
def test_openai_embedder_refuses_bad_vectors_from_the_endpoint(
    kind: str, embeddings_server: OpenAICompatibleServer
) -> None:
    embedder = OpenAIEmbedder(api_key="test-key", base_url=embeddings_server.base_url, dimensions=DIMS)
    embeddings_server.enqueue({"vectors": [BAD_VECTORS[kind]()]}, endpoint="embeddings")
    with pytest.raises(EmbedderUnavailable):
        query_embed("what colour is the sky", embedder)
    asked = len(embeddings_server.requests)

    vector = query_embed("what colour is the sky", embedder)  # the endpoint answers properly again
    assert vector_problem(vector, DIMS) is None
    assert len(embeddings_server.requests) == asked + 1  # asked again, not remembered
    query_embed("what colour is the sky", embedder)
    assert len(embeddings_server.requests) == asked + 2  # nor is a good one: no vector kept in the process


def test_openai_embedder_learns_no_size_from_a_bad_first_reply(
    embeddings_server: OpenAICompatibleServer,
) -> None:
    embedder = OpenAIEmbedder(api_key="test-key", base_url=embeddings_server.base_url)
    embeddings_server.enqueue({"vectors": [[math.nan] * 3]}, endpoint="embeddings")
    with pytest.raises(EmbedderUnavailable):
        embedder.embed(["x"])
    assert len(embedder.embed(["x"])[0]) == DIMS and embedder.dimensions == DIMS


def test_openai_embedder_refuses_a_size_change_as_retryable(
    embeddings_server: OpenAICompatibleServer,
) -> None:
    embedder = OpenAIEmbedder(api_key="test-key", base_url=embeddings_server.base_url)
    embedder.embed(["learn the size"])
    embeddings_server.enqueue({"vectors": [[0.5] * (DIMS * 2)]}, endpoint="embeddings")
    with pytest.raises(EmbedderUnavailable, match=f"{DIMS * 2}-d.*expected {DIMS}"):
        embedder.embed(["x"])


@pytest.mark.django_db
def test_openai_embedder_bad_reply_stores_nothing(embeddings_server: OpenAICompatibleServer) -> None:
    messages = saved_messages(["one", "two"])
    embedder = OpenAIEmbedder(api_key="test-key", base_url=embeddings_server.base_url, dimensions=DIMS)
    embeddings_server.enqueue({"vectors": [[0.5] * DIMS, [0.0] * DIMS]}, endpoint="embeddings")
    with pytest.raises(EmbedderUnavailable):
        sources_embed(sources=sources(messages), embedder=embedder)
    assert MessageEmbedding.objects.count() == 0
    asked = len(embeddings_server.requests)
    assert sources_embed(sources=sources(messages), embedder=embedder) == 2
    requests = embeddings_server.requests[asked:]
    assert [r["input"] for r in requests] == [["one", "two"]]  # nothing of the bad reply was kept
    for row in MessageEmbedding.objects.all():
        assert vector_problem(row.vector, DIMS) is None


# Raw replies no OpenAI-compatible server should send: the adapter must not crash on them.
RAW_REPLIES: dict[str, tuple[str, bytes]] = {
    "html": ("text/html", b"<html><body>502 Bad Gateway</body></html>"),
    "not json": ("application/json", b"{not json"),
    "data is null": ("application/json", b'{"object": "list", "data": null}'),
    "no data": ("application/json", b'{"object": "list"}'),
    "a list": ("application/json", b"[1, 2, 3]"),
    "embedding is a string": (
        "application/json",
        b'{"object": "list", "data": [{"index": 0, "embedding": "AAAA"}]}',
    ),
    "embedding is null": (
        "application/json",
        b'{"object": "list", "data": [{"index": 0, "embedding": null}]}',
    ),
    "ragged": (
        "application/json",
        json.dumps(
            {"data": [{"index": 0, "embedding": [0.1] * DIMS}, {"index": 1, "embedding": [0.1]}]}
        ).encode(),
    ),
    "index is a string": (
        "application/json",
        json.dumps({"data": [{"index": "a", "embedding": [0.1] * DIMS}]}).encode(),
    ),
}


@pytest.fixture
def raw_server() -> Iterator[tuple[str, dict[str, tuple[str, bytes]]]]:
    pytest.importorskip("openai")
    script: dict[str, tuple[str, bytes]] = {}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            content_type, body = script["reply"]
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", script
    httpd.shutdown()
    httpd.server_close()


@pytest.mark.parametrize("kind", sorted(RAW_REPLIES))
def test_openai_embedder_malformed_replies_are_embedder_errors(kind: str, raw_server) -> None:
    base_url, script = raw_server
    script["reply"] = RAW_REPLIES[kind]
    texts = ["a", "b"] if kind == "ragged" else ["a"]
    with pytest.raises(EmbedderUnavailable):
        OpenAIEmbedder(api_key="k", base_url=base_url, dimensions=DIMS).embed(texts)
