"""The default TOKENIZER, "auto": tiktoken when its encoding file is cached, else quicktok, else an
estimate with a `manage.py check` warning; never a download. And tiktoken's counts equal quicktok's.

tiktoken's cache is filled here from quicktok's vocabulary (tests/tiktoken_cache.py): the file
written has the SHA-256 tiktoken checks for OpenAI's own file, so it is that file, byte for byte.
"""

from __future__ import annotations

import importlib.util
import logging
import random
import sys

import pytest
from django.test import override_settings

from memproc.checks import check_settings
from memproc.exceptions import ConfigurationError
from memproc.messages import Message, TextPart
from memproc.processors.token_choice import TIKTOKEN_FILES, auto_counter_choice, tiktoken_cached_file
from memproc.processors.tokens import (
    CharEstimateCounter,
    QuicktokCounter,
    TiktokenCounter,
    TokenCounter,
    get_token_counter,
    reset_token_counters,
)
from tests.tiktoken_cache import put_in_tiktoken_cache

from .conftest import tool_call, tool_result, user

HAS_TIKTOKEN = importlib.util.find_spec("tiktoken") is not None
HAS_QUICKTOK = importlib.util.find_spec("quicktok") is not None
needs_tiktoken = pytest.mark.skipif(not HAS_TIKTOKEN, reason="tiktoken is not installed in this environment")
needs_quicktok = pytest.mark.skipif(
    not HAS_QUICKTOK, reason="quicktok-v1 (the offline-tokens extra) is not installed"
)


@pytest.fixture(autouse=True)
def offline(tmp_path, monkeypatch):
    """An empty tiktoken cache, and built counters forgotten before and after each test."""
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "tiktoken-cache"))
    monkeypatch.delenv("DATA_GYM_CACHE_DIR", raising=False)
    reset_token_counters()
    yield
    reset_token_counters()


@pytest.fixture
def cache_tiktoken_file(tmp_path):
    """Puts tiktoken's file for an encoding where tiktoken's cache has it: what a deploy step would do."""

    def put(encoding: str = "o200k_base", data: bytes | None = None):
        return put_in_tiktoken_cache(tmp_path / "tiktoken-cache", encoding, data)

    return put


@pytest.fixture
def no_downloads(monkeypatch):
    """tiktoken with nothing loaded yet in this process, whose downloads fail (and are recorded)."""
    if not HAS_TIKTOKEN:
        return []
    import tiktoken.load
    import tiktoken.registry

    monkeypatch.setattr(tiktoken.registry, "ENCODINGS", {})
    fetched: list[str] = []

    def refuse(blobpath):
        fetched.append(blobpath)
        raise ConnectionError(f"no network in this test: {blobpath}")  # an OSError, as requests' are

    monkeypatch.setattr(tiktoken.load, "read_file", refuse)
    return fetched


@pytest.fixture
def hide(monkeypatch):
    """Makes packages look uninstalled: `import` fails and `find_spec` finds nothing."""

    def hide(*modules: str) -> None:
        for module in modules:
            monkeypatch.setitem(sys.modules, module, None)

    return hide


# --- the order ---------------------------------------------------------------------------------------


@needs_tiktoken
@needs_quicktok
def test_auto_counts_with_tiktoken_when_its_file_is_cached(cache_tiktoken_file, no_downloads):
    cache_tiktoken_file("o200k_base")
    counter = get_token_counter()
    assert isinstance(counter, TiktokenCounter)
    assert counter.id == "tiktoken:o200k_base"
    assert counter.count_text("hello world") == 2
    assert no_downloads == []


@needs_quicktok
def test_auto_counts_with_quicktok_when_tiktoken_has_no_cached_file(no_downloads, caplog):
    with caplog.at_level(logging.INFO, logger="memproc.processors.tokens"):
        counter = get_token_counter()
    assert isinstance(counter, QuicktokCounter)
    assert counter.id == "quicktok:o200k_base"
    assert no_downloads == [], "auto must never let tiktoken download: it does so without a timeout"
    why = "not in its cache" if HAS_TIKTOKEN else "tiktoken is not installed"
    assert "quicktok:o200k_base" in caplog.text and why in caplog.text


@needs_quicktok
def test_auto_counts_with_quicktok_when_tiktoken_is_not_installed(cache_tiktoken_file, hide):
    cache_tiktoken_file("o200k_base")
    hide("tiktoken")
    assert get_token_counter().id == "quicktok:o200k_base"
    assert "tiktoken is not installed" in auto_counter_choice().reason


@needs_quicktok
def test_a_cached_file_that_is_not_tiktokens_is_not_used(cache_tiktoken_file, no_downloads):
    """tiktoken deletes a file whose hash does not match, and downloads it again: auto must not go there."""
    path = cache_tiktoken_file("o200k_base", data=b"aGVsbG8= 0\n")
    assert tiktoken_cached_file("o200k_base") is None
    assert get_token_counter().id == "quicktok:o200k_base"
    assert path.exists() and no_downloads == []


def test_without_either_auto_estimates_and_the_check_says_how_to_count_exactly(hide, caplog):
    hide("quicktok")
    with caplog.at_level(logging.WARNING, logger="memproc.processors.tokens"):
        counter = get_token_counter()
    assert isinstance(counter, CharEstimateCounter)
    assert counter.count_text("abcdefgh") == 2
    assert "estimates" in caplog.text
    with override_settings(MEMPROC={}):
        [warning] = check_settings()
    assert warning.id == "memproc.W009" and "estimate" in warning.msg
    assert 'pip install "django-memproc[offline-tokens]"' in warning.hint
    assert "TIKTOKEN_CACHE_DIR" in warning.hint and "TiktokenCounter" in warning.hint


@needs_quicktok
def test_the_check_is_silent_when_auto_counts_exactly():
    with override_settings(MEMPROC={"TOKENIZER": "auto"}):
        assert check_settings() == []


def test_auto_chooses_once_per_process(hide, monkeypatch):
    hide("quicktok")
    first = get_token_counter()
    assert isinstance(first, CharEstimateCounter)
    monkeypatch.delitem(sys.modules, "quicktok")  # installed again: the choice stands until a reset
    assert get_token_counter() is first
    reset_token_counters()
    assert get_token_counter() is not first


@needs_tiktoken
@needs_quicktok
def test_an_explicit_tokenizer_is_honoured(cache_tiktoken_file, no_downloads):
    cache_tiktoken_file("o200k_base")
    with override_settings(MEMPROC={"TOKENIZER": "memproc.processors.tokens.QuicktokCounter"}):
        assert get_token_counter().id == "quicktok:o200k_base"
    spec = {"CLASS": "memproc.processors.tokens.TiktokenCounter", "OPTIONS": {"encoding": "o200k_base"}}
    with override_settings(MEMPROC={"TOKENIZER": spec}):
        assert get_token_counter().id == "tiktoken:o200k_base"


def test_quicktok_named_but_not_installed_is_a_check_error_naming_the_extra(hide):
    hide("quicktok")
    spec = "memproc.processors.tokens.QuicktokCounter"
    with override_settings(MEMPROC={"TOKENIZER": spec}):
        [error] = check_settings()
        assert error.id == "memproc.E008" and "quicktok-v1" in error.msg
        assert 'pip install "django-memproc[offline-tokens]"' in error.hint
        with pytest.raises(ConfigurationError, match="offline-tokens"):
            get_token_counter()


@needs_tiktoken
@needs_quicktok
def test_a_cached_file_tiktoken_still_cannot_load_falls_back_to_quicktok(
    cache_tiktoken_file, no_downloads, monkeypatch, caplog
):
    import tiktoken

    cache_tiktoken_file("o200k_base")

    def broken(name):
        raise ValueError(f"{name}: a tiktoken that reads its files differently")

    monkeypatch.setattr(tiktoken, "get_encoding", broken)
    with caplog.at_level(logging.WARNING, logger="memproc.processors.tokens"):
        assert get_token_counter().id == "quicktok:o200k_base"
    assert "TiktokenCounter did not load" in caplog.text and no_downloads == []


def test_tiktoken_named_but_not_installed_is_a_check_error(hide):
    hide("tiktoken")
    with override_settings(MEMPROC={"TOKENIZER": "memproc.processors.tokens.TiktokenCounter"}):
        [error] = check_settings()
        assert error.id == "memproc.E008" and "tiktoken" in error.msg
        with pytest.raises(ConfigurationError, match="needs tiktoken"):
            get_token_counter()


# --- TiktokenCounter -----------------------------------------------------------------------------------


@needs_tiktoken
def test_tiktoken_that_cannot_load_its_file_is_a_configuration_error(no_downloads):
    with pytest.raises(ConfigurationError, match="TIKTOKEN_CACHE_DIR"):
        TiktokenCounter(encoding="o200k_base")
    assert no_downloads == ["https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"]


@needs_tiktoken
def test_tiktoken_unknown_encoding_is_a_configuration_error(no_downloads):
    with pytest.raises(ConfigurationError, match="unknown encoding 'o300k'"):
        TiktokenCounter(encoding="o300k")
    with pytest.raises(ConfigurationError):
        TiktokenCounter(encoding="")
    assert no_downloads == []


@needs_tiktoken
def test_memproc_looks_for_the_files_tiktoken_fetches(monkeypatch):
    """TIKTOKEN_FILES (what "auto" looks for in the cache) names what this tiktoken would download."""
    import tiktoken.load
    from tiktoken_ext import openai_public

    asked: list[tuple[str, str]] = []

    def record(blobpath, expected_hash=None):
        asked.append((blobpath, expected_hash))
        raise LookupError("recorded")

    monkeypatch.setattr(tiktoken.load, "read_file_cached", record)
    for encoding in TIKTOKEN_FILES:
        with pytest.raises(LookupError):
            getattr(openai_public, encoding)()
    assert asked == list(TIKTOKEN_FILES.values())


# --- the same counts --------------------------------------------------------------------------------------


def sample_texts() -> list[str]:
    texts = [
        "hello world",
        "Hello, World! How's it going? I'm fine; they've said we'd go.",
        "Привет, как дела? Всё хорошо.",
        "こんにちは世界、今日はいい天気ですね。",
        "我们今天去公园散步吧。",
        "مرحبا بالعالم",
        "नमस्ते दुनिया",
        "def f(x):\n    return x * 2  # double\n\n\nclass A:\n\tpass\n",
        '{"city": "Paris", "days": 3, "temps": [21.5, 23.0]}',
        "  spaced   out  \n\n  \r\n\t end",
        "1234567890 3.14159 1,000,000 2026-12-03T22:10:45Z",
        "emoji 👩‍👩‍👧‍👦 🇫🇷 ✨🎉",
        "<|endoftext|> <|im_start|>user",
        "bad \ud800 char \udfff",
        "https://example.com/a/b?c=d&e=f#g",
        "ALLCAPS CamelCaseWords snake_case_words kebab-case-words",
        "",
        " ",
        "\n",
    ]
    rng = random.Random(20261203)
    alphabet = "abcXYZ 019.,;!?'\"\n\t-_/()[]{}éüßçñøΩЖ中文日本語한국어🙂\u0301\u200d"
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 400))) for _ in range(200)]
    return texts


@pytest.fixture
def counters(request, cache_tiktoken_file, no_downloads):
    """TiktokenCounter and QuicktokCounter on the same encoding; skipped where tiktoken cannot load."""
    if not HAS_TIKTOKEN:
        pytest.skip("tiktoken is not installed here: nothing to compare quicktok's counts with")
    if not HAS_QUICKTOK:
        pytest.skip(
            "quicktok-v1 is not installed: tiktoken's file cannot be written offline from its vocabulary"
        )
    cache_tiktoken_file(request.param)
    try:
        tiktoken_counter = TiktokenCounter(encoding=request.param)
    except ConfigurationError as exc:
        pytest.skip(f"tiktoken could not load {request.param} here: {exc}")
    return tiktoken_counter, QuicktokCounter(encoding=request.param)


@pytest.mark.parametrize("counters", ["o200k_base", "cl100k_base"], indirect=True)
def test_tiktoken_and_quicktok_count_the_same(counters):
    tiktoken_counter, quicktok_counter = counters
    texts = sample_texts()
    assert [tiktoken_counter.count_text(t) for t in texts] == [quicktok_counter.count_text(t) for t in texts]
    messages = [
        user("What's the weather like in Paris? 🌦"),
        tool_call("c1", "get_weather", {"city": "Paris", "days": 2}, text="Let me check."),
        tool_result("c1", "get_weather", {"sat": "sunny", "sun": "rain"}),
        Message.create("user", [TextPart(t) for t in texts[:5]]),
    ]
    assert [tiktoken_counter.count_message(m) for m in messages] == [
        quicktok_counter.count_message(m) for m in messages
    ]


@needs_tiktoken
@needs_quicktok
def test_tiktoken_counter_satisfies_the_protocol(cache_tiktoken_file, no_downloads):
    cache_tiktoken_file("o200k_base")
    counter = TiktokenCounter()
    assert isinstance(counter, TokenCounter)
    assert repr(counter) == "<TiktokenCounter tiktoken:o200k_base>"
