"""HashEmbedder is the benchmark workload's embedder: the same vectors, bit for bit."""

from __future__ import annotations

import importlib.util
import json
import math
import re
from pathlib import Path

import pytest

from memproc.exceptions import ConfigurationError
from memproc.testing.embedders import HashEmbedder, fnv1a_32

BENCH = Path(__file__).resolve().parents[2].parent / "shared" / "bench"


def reference_embed(text: str) -> list[float]:
    """lib/workload.mjs's embedder, as ported in shared/bench/workload_ref.py (kept here verbatim)."""
    v = [0.0] * 384
    for tok in re.findall(r"[a-z0-9]+", text.lower()):
        h = fnv1a_32(tok)
        v[h % 384] += 1 if h < 2**31 else -1
    n = math.sqrt(sum(x * x for x in v))
    if n == 0:
        v[0] = 1
        return v
    return [x / n for x in v]


SAMPLES = [
    "",
    "!!! ...",
    "Hello, World",
    "msg 0: kalo mine kalo kalo",
    "The quick brown fox jumps over the lazy dog 42 times",
    "ÜBER straße — naïve café 123abc",
    "a " * 500,
]


@pytest.fixture(scope="module")
def workload_ref():
    path = BENCH / "workload_ref.py"
    if not path.exists():
        pytest.skip("shared/bench/workload_ref.py is not beside the repository")
    spec = importlib.util.spec_from_file_location("workload_ref", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # also checks its own reference.json
    return module


def test_fnv1a_matches_the_published_values() -> None:
    assert fnv1a_32("") == 0x811C9DC5
    assert fnv1a_32("a") == 0xE40C292C
    assert fnv1a_32("foobar") == 0xBF9CF968


def test_matches_the_workload_reference_on_its_own_texts(workload_ref) -> None:
    embedder = HashEmbedder(dimensions=384)
    texts = [workload_ref.make_text(stream, i) for stream in workload_ref.STREAMS for i in range(50)]
    assert embedder.embed(texts + SAMPLES) == [workload_ref.embed(t) for t in texts + SAMPLES]


def test_matches_the_reference_vector_in_reference_json() -> None:
    path = BENCH / "reference.json"
    if not path.exists():
        pytest.skip("shared/bench/reference.json is not beside the repository")
    reference = json.loads(path.read_text())
    text = reference["text"]["prefill_0"]
    vector = HashEmbedder(dimensions=384).embed([text])[0]
    nonzero = [[i, round(x, 6)] for i, x in enumerate(vector) if x != 0]
    assert nonzero == reference["embedding_prefill_0_nonzero"]
    assert {token: fnv1a_32(token) for token in reference["fnv1a32"]} == reference["fnv1a32"]


def test_matches_the_reference_function_without_shared_files() -> None:
    assert HashEmbedder(dimensions=384).embed(SAMPLES) == [reference_embed(t) for t in SAMPLES]


def test_vectors_are_unit_length_and_deterministic() -> None:
    embedder = HashEmbedder(dimensions=64)
    first = embedder.embed(["alpha beta gamma", "alpha"])
    assert first == HashEmbedder(dimensions=64).embed(["alpha beta gamma", "alpha"])
    for vector in first:
        assert len(vector) == 64
        assert math.isclose(math.fsum(x * x for x in vector), 1.0, rel_tol=1e-12)


def test_texts_sharing_words_are_closer_than_unrelated_ones() -> None:
    a, b, c = HashEmbedder(dimensions=256).embed(
        ["reset my password please", "I need to reset the password", "sunny weather at the beach"]
    )
    assert sum(x * y for x, y in zip(a, b, strict=True)) > sum(x * y for x, y in zip(a, c, strict=True))


def test_id_names_the_dimensions_and_bad_sizes_are_refused() -> None:
    assert HashEmbedder(dimensions=384).id == "hash-384"
    assert HashEmbedder().dimensions == 64
    with pytest.raises(ConfigurationError):
        HashEmbedder(dimensions=0)
