"""chunk_text, content_hash and get_embedder."""

from __future__ import annotations

import pytest
from django.test import override_settings

from memproc.embedders import Embedder, MiniLMEmbedder, chunk_text, content_hash, get_embedder
from memproc.exceptions import ConfigurationError
from memproc.testing.embedders import HashEmbedder

HASH_PATH = "memproc.testing.embedders.HashEmbedder"


def test_short_text_is_one_chunk_and_blank_text_none() -> None:
    assert chunk_text("  Hello there.  ", 100) == ["Hello there."]
    assert chunk_text(" \n\t ", 100) == []


def test_chunks_never_exceed_the_limit_and_keep_every_word() -> None:
    text = "\n\n".join(
        " ".join(f"Sentence {p}.{s} has some words in it." for s in range(7)) for p in range(9)
    )
    for limit in (20, 50, 120, 400, 1000):
        chunks = chunk_text(text, limit)
        assert all(0 < len(chunk) <= limit for chunk in chunks)
        assert " ".join(chunks).split() == text.split()


def test_paragraphs_are_the_first_boundary() -> None:
    first, second = "First paragraph. It has two sentences.", "Second paragraph, one sentence."
    assert chunk_text(f"{first}\n\n{second}", 50) == [first, second]


def test_paragraphs_pack_together_up_to_the_limit() -> None:
    text = "One.\n\nTwo.\n\nThree is longer than the others."
    assert chunk_text(text, 12) == ["One.\n\nTwo.", "Three is", "longer than", "the others."]


def test_long_paragraph_splits_on_sentences_then_words() -> None:
    text = "Short one. " + "word " * 30 + "end. Last sentence here."
    chunks = chunk_text(text, 40)
    assert chunks[0] == "Short one."
    assert chunks[-1] == "Last sentence here."
    assert all(len(c) <= 40 for c in chunks)


def test_a_word_longer_than_the_limit_is_cut() -> None:
    assert chunk_text("x" * 25, 10) == ["x" * 10, "x" * 10, "x" * 5]


def test_chunk_limit_must_be_positive() -> None:
    with pytest.raises(ValueError):
        chunk_text("text", 0)


def test_content_hash_depends_on_text_and_embedder() -> None:
    digest = content_hash("hello", "hash-64")
    assert len(digest) == 64 and int(digest, 16) >= 0
    assert digest == content_hash("hello", "hash-64")
    assert digest != content_hash("hello", "hash-32")
    assert digest != content_hash("hello!", "hash-64")


def test_get_embedder_returns_an_embedder_object_as_is() -> None:
    embedder = HashEmbedder(dimensions=8)
    assert get_embedder(embedder) is embedder
    assert isinstance(embedder, Embedder)


def test_get_embedder_builds_once_per_spec() -> None:
    spec = {"CLASS": HASH_PATH, "OPTIONS": {"dimensions": 16}}
    first = get_embedder(spec)
    assert first.dimensions == 16
    assert get_embedder({"OPTIONS": {"dimensions": 16}, "CLASS": HASH_PATH}) is first
    assert get_embedder(HASH_PATH) is get_embedder(HASH_PATH)
    assert get_embedder(HASH_PATH) is not first
    assert get_embedder(HashEmbedder) is get_embedder(HashEmbedder)


def test_get_embedder_defaults_to_the_setting_and_resets_when_it_changes() -> None:
    with override_settings(MEMPROC={"EMBEDDER": {"CLASS": HASH_PATH, "OPTIONS": {"dimensions": 24}}}):
        first = get_embedder()
        assert first.id == "hash-24"
        assert get_embedder() is first
    with override_settings(MEMPROC={"EMBEDDER": {"CLASS": HASH_PATH, "OPTIONS": {"dimensions": 24}}}):
        assert get_embedder() is not first  # the cache was dropped with the setting
        assert get_embedder().id == "hash-24"


def test_get_embedder_reports_a_bad_path() -> None:
    with pytest.raises(ConfigurationError):
        get_embedder("memproc.embedders.NoSuchEmbedder")


def test_default_setting_names_the_local_minilm() -> None:
    from memproc.conf import DEFAULTS

    assert get_embedder(DEFAULTS["EMBEDDER"]).__class__ is MiniLMEmbedder
