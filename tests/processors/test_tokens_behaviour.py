"""Token counters, what test_tokens.py leaves open: the exact words of every configuration error (a
developer reads them at startup), what each kind of part costs, that nothing is remembered between
counts, and which specs give the same configured counter."""

from __future__ import annotations

import datetime as dt
import importlib.util
import logging
import sys
import threading
import time
import types

import pytest
from django.test import override_settings

from memproc.exceptions import ConfigurationError
from memproc.messages import AttachmentRef, FilePart, Message, TextPart, ToolCallPart, ToolResultPart
from memproc.processors.token_choice import ESTIMATE, AutoChoice
from memproc.processors.tokens import (
    CharEstimateCounter,
    MessageCounter,
    QuicktokCounter,
    TiktokenCounter,
    check_counter_spec,
    get_token_counter,
    is_token_counter,
    reset_token_counters,
)

from .conftest import user


@pytest.fixture(autouse=True)
def _fresh_counters(tmp_path, monkeypatch):
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "empty-tiktoken-cache"))
    reset_token_counters()
    yield
    reset_token_counters()


class Counting(CharEstimateCounter):
    """One token per character; records every text it counts."""

    def __init__(self, *, label: str = "", **kwargs):
        super().__init__(chars_per_token=1, **kwargs)
        self.label = label  # an option of its own, for the tests of built specs
        self.texts: list[str] = []

    def count_text(self, text):
        self.texts.append(text)
        return super().count_text(text)


# --- what counts as a counter ------------------------------------------------------------------------


class TextOnly:
    def count_text(self, text):
        return 0


class NotCallable:
    count_text = 0
    count_message = 0


def test_a_counter_is_an_instance_with_both_methods():
    assert is_token_counter(CharEstimateCounter())
    assert not is_token_counter(CharEstimateCounter)
    assert not is_token_counter(TextOnly())
    assert not is_token_counter(NotCallable())
    assert not is_token_counter("memproc.processors.tokens.CharEstimateCounter")


@pytest.mark.parametrize(
    "spec",
    [
        None,
        "memproc.processors.tokens.CharEstimateCounter",
        {"CLASS": "x"},
        CharEstimateCounter,
        CharEstimateCounter(),
    ],
)
def test_counter_specs_a_processor_accepts(spec):
    assert check_counter_spec(spec, owner="TokenLimiter") is None


@pytest.mark.parametrize("spec", [42, TextOnly(), ["memproc.processors.tokens.CharEstimateCounter"]])
def test_other_counter_specs_are_refused_naming_the_owner(spec):
    with pytest.raises(ConfigurationError) as caught:
        check_counter_spec(spec, owner="TokenLimiter")
    assert str(caught.value) == (
        'TokenLimiter(counter=...) must be a token counter, a dotted path, or {"CLASS": ..., "OPTIONS": {...}}'
    )


# --- options --------------------------------------------------------------------------------------------


def test_chars_per_token_error_and_ids():
    for bad in (0, -2.5, False, None):
        with pytest.raises(ConfigurationError) as caught:
            CharEstimateCounter(chars_per_token=bad)
        assert str(caught.value) == "CharEstimateCounter(chars_per_token=...) must be a positive number"
    assert CharEstimateCounter().id == "chars:4"
    assert CharEstimateCounter(chars_per_token=2.5).id == "chars:2.5"
    assert CharEstimateCounter(chars_per_token=0.001).count_text("ab") == 2000
    assert repr(CharEstimateCounter(chars_per_token=3)) == "<CharEstimateCounter chars:3>"


def test_message_counter_leaves_count_text_to_subclasses():
    counter = MessageCounter()
    assert counter.id == "message-counter"
    with pytest.raises(NotImplementedError):
        counter.count_text("x")


def test_quicktok_option_errors(monkeypatch):
    for bad in ("", None, 5):
        with pytest.raises(ConfigurationError) as caught:
            QuicktokCounter(encoding=bad)
        assert str(caught.value) == "QuicktokCounter(encoding=...) must be a non-empty string"
    with pytest.raises(ConfigurationError) as caught:
        QuicktokCounter(encoding="nope")
    assert str(caught.value) == (
        "QuicktokCounter: unknown encoding 'nope'; use one of cl100k_base, o200k_base, "
        "o200k_harmony, llama3, qwen3 or one imported with quicktok.import_tokenizer()"
    )
    assert caught.value.__cause__ is not None
    monkeypatch.setitem(sys.modules, "quicktok", None)
    with pytest.raises(ConfigurationError) as caught:
        QuicktokCounter()
    assert (
        str(caught.value) == 'QuicktokCounter needs quicktok-v1: pip install "django-memproc[offline-tokens]"'
    )


def test_quicktok_defaults_and_id():
    counter = QuicktokCounter()
    assert (counter.encoding, counter.id) == ("o200k_base", "quicktok:o200k_base")
    assert counter.count_text("") == 0
    # a lone surrogate counts as U+FFFD, even next to other text
    assert counter.count_text("\udc00") == counter.count_text("\ufffd")


needs_tiktoken = pytest.mark.skipif(
    importlib.util.find_spec("tiktoken") is None, reason="tiktoken is not installed in this environment"
)


@pytest.fixture
def no_downloads(monkeypatch):
    """tiktoken with nothing loaded in this process, whose downloads fail."""
    import tiktoken.load
    import tiktoken.registry

    monkeypatch.setattr(tiktoken.registry, "ENCODINGS", {})

    def refuse(blobpath):
        raise ConnectionError(f"no network in this test: {blobpath}")

    monkeypatch.setattr(tiktoken.load, "read_file", refuse)


@needs_tiktoken
def test_tiktoken_option_errors(no_downloads, monkeypatch):
    import tiktoken

    for bad in ("", None):
        with pytest.raises(ConfigurationError) as caught:
            TiktokenCounter(encoding=bad)
        assert str(caught.value) == "TiktokenCounter(encoding=...) must be a non-empty string"
    with pytest.raises(ConfigurationError) as caught:
        TiktokenCounter(encoding="o300k")
    names = ", ".join(sorted(tiktoken.list_encoding_names()))
    assert str(caught.value) == f"TiktokenCounter: unknown encoding 'o300k'; use one of {names}"
    with pytest.raises(ConfigurationError) as caught:
        TiktokenCounter(encoding="cl100k_base")
    assert str(caught.value) == (
        "TiktokenCounter: tiktoken could not load 'cl100k_base' (ConnectionError): it downloads the file "
        "at first use unless it is in its cache (TIKTOKEN_CACHE_DIR). Offline, put the file there, or use "
        'QuicktokCounter (pip install "django-memproc[offline-tokens]")'
    )
    assert isinstance(caught.value.__cause__, ConnectionError)
    monkeypatch.setitem(sys.modules, "tiktoken", None)
    with pytest.raises(ConfigurationError) as caught:
        TiktokenCounter()
    assert str(caught.value) == 'TiktokenCounter needs tiktoken: pip install "django-memproc" installs it'


@needs_tiktoken
def test_tiktoken_defaults_and_id(tmp_path):
    from tests.tiktoken_cache import put_in_tiktoken_cache

    put_in_tiktoken_cache(tmp_path / "empty-tiktoken-cache", "o200k_base")
    counter = TiktokenCounter()
    assert (counter.encoding, counter.id) == ("o200k_base", "tiktoken:o200k_base")
    assert counter.count_text("") == 0
    assert counter.count_text("hello world") == 2


@pytest.mark.parametrize("error", [OSError, ValueError, ImportError])
@needs_tiktoken
def test_tiktoken_load_failures_of_each_kind_are_configuration_errors(monkeypatch, error):
    import tiktoken

    def broken(name):
        raise error("cannot")

    monkeypatch.setattr(tiktoken, "get_encoding", broken)
    with pytest.raises(ConfigurationError, match=rf"could not load 'o200k_base' \({error.__name__}\)"):
        TiktokenCounter(encoding="o200k_base")


# --- what a message costs ------------------------------------------------------------------------------


def test_each_part_kind_costs_its_own_texts():
    counter = Counting()
    message = Message.create(
        "assistant",
        [TextPart("abc"), ToolCallPart("c1", "find", {"q": "é"}), TextPart("")],
    )
    assert counter.count_message(message) == 3 + 4 + len('{"q": "\\u00e9"}') + 0 + 4
    assert counter.texts == ["abc", "find", '{"q": "\\u00e9"}', ""]


def test_tool_results_cost_their_text_or_json_and_one_envelope_each():
    counter = Counting()
    when = dt.date(2026, 1, 2)
    message = Message.create(
        "tool",
        [
            ToolResultPart("c1", "t", "plain"),
            ToolResultPart("c2", "t", None),
            ToolResultPart("c3", "t", [1, "a"]),
            ToolResultPart("c4", "t", {"when": when}),
        ],
    )
    assert counter.count_message(message) == 5 + 4 + 8 + 22 + 4 * 4
    assert counter.texts == ["plain", "null", '[1, "a"]', '{"when": "2026-01-02"}']


def test_a_message_with_text_and_one_result_is_one_envelope():
    counter = Counting()
    message = Message.create("tool", [TextPart("ab"), ToolResultPart("c1", "t", "x")])
    assert counter.count_message(message) == 2 + 1 + 4


def test_images_and_other_files_cost_their_estimates():
    counter = Counting()
    image_ref = Message.create("user", [AttachmentRef("a1", "p.png", "image/png", 10)])
    remote_image = Message.create("user", [FilePart(url="https://example.com/p.gif", media_type="image/gif")])
    other = Message.create("user", [FilePart(url="https://example.com/a", media_type="imagex/odd")])
    both = Message.create(
        "user", [TextPart("ab"), FilePart(data=b"x", media_type="application/pdf"), image_ref.parts[0]]
    )
    assert counter.count_message(image_ref) == counter.count_message(remote_image) == 765 + 4
    assert counter.count_message(other) == 258 + 4
    assert counter.count_message(both) == 2 + 258 + 765 + 4


# --- counting again ------------------------------------------------------------------------------------


def test_a_message_with_the_same_id_and_parts_but_another_role_is_counted_again():
    counter = Counting()
    as_user = user("hello", id="m1")
    counter.count_message(as_user)
    counter.count_message(as_user.replace(role="assistant"))
    assert counter.texts == ["hello", "hello"]


class Touchy:
    """A tool result whose comparison fails, as some third-party objects' do."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __eq__(self, other):
        raise RuntimeError("cannot compare")

    __hash__ = object.__hash__

    def __str__(self) -> str:
        return self.text


def test_parts_that_cannot_be_compared_are_counted_again():
    counter = Counting()
    first = Message.create("tool", [ToolResultPart("c1", "t", Touchy("short"))], id="m1")
    second = Message.create("tool", [ToolResultPart("c1", "t", Touchy("a longer text"))], id="m1")
    assert counter.count_message(first) == len('"short"') + 4
    assert counter.count_message(second) == len('"a longer text"') + 4


# --- the configured counter ---------------------------------------------------------------------------


def test_the_same_spec_in_another_key_order_is_the_same_counter():
    one = {
        "CLASS": "memproc.processors.tokens.CharEstimateCounter",
        "OPTIONS": {"chars_per_token": 3},
    }
    two = {
        "OPTIONS": {"chars_per_token": 3},
        "CLASS": "memproc.processors.tokens.CharEstimateCounter",
    }
    counter = get_token_counter(one)
    assert counter.id == "chars:3"
    assert get_token_counter(two) is counter
    other = {"CLASS": "memproc.processors.tokens.CharEstimateCounter", "OPTIONS": {"chars_per_token": 2}}
    assert get_token_counter(other) is not counter
    assert get_token_counter(CharEstimateCounter) is get_token_counter(CharEstimateCounter)


def test_a_spec_naming_its_class_by_object_is_built_once():
    spec = {"CLASS": CharEstimateCounter, "OPTIONS": {"chars_per_token": 2}}
    counter = get_token_counter(spec)
    assert counter.id == "chars:2"
    assert get_token_counter({"CLASS": CharEstimateCounter, "OPTIONS": {"chars_per_token": 2}}) is counter


def test_the_setting_is_read_when_no_spec_is_given():
    with override_settings(MEMPROC={"TOKENIZER": {"CLASS": "memproc.processors.tokens.CharEstimateCounter"}}):
        assert get_token_counter().id == "chars:4"


def test_a_spec_that_cannot_be_a_key_is_a_configuration_error():
    with pytest.raises(ConfigurationError) as caught:
        get_token_counter(["memproc.processors.tokens.CharEstimateCounter"])
    assert str(caught.value) == (
        "MEMPROC['TOKENIZER']: cannot build a token counter from ['memproc.processors.tokens.CharEstimateCounter']"
    )
    assert isinstance(caught.value.__cause__, TypeError)


def test_a_spec_that_cannot_be_imported_names_the_setting():
    with pytest.raises(ConfigurationError) as caught:
        get_token_counter("memproc.processors.tokens.NoSuchCounter")
    assert str(caught.value).startswith(
        "MEMPROC['TOKENIZER']: cannot import 'memproc.processors.tokens.NoSuchCounter': "
    )


def test_a_read_only_mapping_is_a_spec_too():
    spec = types.MappingProxyType({"CLASS": ESTIMATE, "OPTIONS": {"chars_per_token": 5}})
    assert get_token_counter(spec).id == "chars:5"


def test_a_spec_with_wrong_options_names_them():
    spec = {"CLASS": "memproc.processors.tokens.CharEstimateCounter", "OPTIONS": {"bogus": 1}}
    with pytest.raises(ConfigurationError) as caught:
        get_token_counter(spec)
    assert str(caught.value).startswith(f"MEMPROC['TOKENIZER']: cannot build {spec!r}: ")
    assert "bogus" in str(caught.value)


class IntId:
    id = 7

    def count_text(self, text):
        return 0

    def count_message(self, message):
        return 0


def test_a_spec_that_gives_no_counter_is_refused():
    for spec in ("builtins.dict", "tests.processors.test_tokens_behaviour.IntId"):
        with pytest.raises(ConfigurationError) as caught:
            get_token_counter(spec)
        assert str(caught.value) == (
            f"MEMPROC['TOKENIZER']: {spec!r} did not give a token counter "
            "(an object with `id`, `count_text(text)` and `count_message(message)`)"
        )


def test_other_setting_changes_keep_the_built_counters():
    spec = "memproc.processors.tokens.CharEstimateCounter"
    counter = get_token_counter(spec)
    with override_settings(USE_TZ=True):
        assert get_token_counter(spec) is counter
    assert get_token_counter(spec) is counter


# --- "auto": what it builds, what it logs, and building once under concurrency -------------------------

HERE = "tests.processors.test_tokens_behaviour"


class BrokenCounter(CharEstimateCounter):
    def __init__(self, **kwargs):
        raise ConfigurationError("this one cannot load")


class SlowCounter(CharEstimateCounter):
    """Builds slowly, so a second caller arrives while the first one builds; counts its builds."""

    built: list[SlowCounter] = []
    building = threading.Event()

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        SlowCounter.building.set()
        time.sleep(0.3)
        SlowCounter.built.append(self)


def choose(monkeypatch, *choices: AutoChoice) -> list[frozenset[str]]:
    """Makes "auto" choose the first of `choices` not skipped; returns the skip sets it was asked with."""
    asked: list[frozenset[str]] = []

    def fake(*, skip=frozenset()):
        asked.append(skip)
        return next(c for c in choices if c.spec not in skip)

    monkeypatch.setattr("memproc.processors.tokens.auto_counter_choice", fake)
    return asked


def test_auto_builds_its_choice_with_its_options_and_says_so(monkeypatch, caplog):
    choose(
        monkeypatch,
        AutoChoice(f"{HERE}.Counting", {"label": "seven"}, "a test choice"),
    )
    with caplog.at_level(logging.INFO, logger="memproc.processors.tokens"):
        counter = get_token_counter("auto")
    assert isinstance(counter, Counting) and counter.label == "seven"
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.INFO, 'memproc: TOKENIZER "auto" counts tokens with chars:1: a test choice.')
    ]
    assert get_token_counter("auto") is counter


def test_auto_skips_an_exact_counter_that_fails_and_warns(monkeypatch, caplog):
    asked = choose(
        monkeypatch,
        AutoChoice(f"{HERE}.BrokenCounter", {}, "first"),
        AutoChoice(ESTIMATE, {"chars_per_token": 3}, "last resort"),
    )
    with caplog.at_level(logging.INFO, logger="memproc.processors.tokens"):
        assert get_token_counter("auto").id == "chars:3"
    assert asked == [frozenset(), frozenset({f"{HERE}.BrokenCounter"})]
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (
            logging.WARNING,
            f'memproc: TOKENIZER "auto": {HERE}.BrokenCounter did not load (this one cannot load); trying the next',
        ),
        (logging.WARNING, 'memproc: TOKENIZER "auto" counts tokens with chars:3: last resort.'),
    ]


def test_auto_raises_when_the_estimate_itself_fails(monkeypatch):
    choose(monkeypatch, AutoChoice(ESTIMATE, {"chars_per_token": 0}, "broken"))
    with pytest.raises(ConfigurationError, match="chars_per_token"):
        get_token_counter("auto")


@pytest.mark.parametrize("spec", ["auto", f"{HERE}.SlowCounter"])
def test_two_threads_asking_at_once_get_one_counter_built_once(monkeypatch, spec):
    choose(monkeypatch, AutoChoice(f"{HERE}.SlowCounter", {}, "slow"))
    SlowCounter.built.clear()
    SlowCounter.building.clear()
    got: list[object] = []

    def ask():
        got.append(get_token_counter(spec))

    first = threading.Thread(target=ask)
    first.start()
    assert SlowCounter.building.wait(5)
    second = threading.Thread(target=ask)  # arrives while the first one builds
    second.start()
    first.join(5)
    second.join(5)
    assert len(SlowCounter.built) == 1
    assert got == [SlowCounter.built[0]] * 2
    assert get_token_counter(spec) is SlowCounter.built[0]
