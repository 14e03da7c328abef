"""Token counters: exact quicktok counts, the chat-format overhead, no memory of what was counted, and the setting.

tiktoken, and how the default ("auto") chooses between the counters: test_token_choice.py."""

from __future__ import annotations

import gc
import json
import types

import pytest
import quicktok
from django.test import override_settings

from memproc.exceptions import ConfigurationError
from memproc.messages import (
    AttachmentRef,
    FilePart,
    Message,
    TextPart,
    ToolResultPart,
    message_from_content,
)
from memproc.processors.tokens import (
    CharEstimateCounter,
    QuicktokCounter,
    TokenCounter,
    get_token_counter,
    reset_token_counters,
)

from .conftest import tool_call, tool_result, user


@pytest.fixture(autouse=True)
def _fresh_counters(tmp_path, monkeypatch):
    # Offline, with nothing in tiktoken's cache: the default ("auto") counts with quicktok.
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "empty-tiktoken-cache"))
    reset_token_counters()
    yield
    reset_token_counters()


# --- exact counts ---------------------------------------------------------------------------------


def test_hello_world_is_two_tokens_in_o200k(o200k):
    assert o200k.count_text("hello world") == 2
    assert o200k.id == "quicktok:o200k_base"


@pytest.mark.parametrize(
    "text",
    [
        "hello world",
        "Привет, как дела?",
        "こんにちは世界",
        "def f(x):\n    return x * 2\n",
        "  spaced   out  ",
    ],
)
@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
def test_counts_match_the_encoding(text, encoding):
    counter = QuicktokCounter(encoding=encoding)
    assert counter.count_text(text) == len(quicktok.get_encoding(encoding).encode_ordinary(text))


def test_encodings_differ_where_the_vocabularies_differ():
    text = "こんにちは世界"
    assert QuicktokCounter(encoding="o200k_base").count_text(text) == 2
    assert QuicktokCounter(encoding="cl100k_base").count_text(text) == 4


def test_special_token_text_counts_as_ordinary_text(o200k):
    assert o200k.count_text("<|endoftext|>") == 7


def test_empty_text_and_lone_surrogates(o200k):
    assert o200k.count_text("") == 0
    assert o200k.count_text("bad \ud800 char") == o200k.count_text("bad \ufffd char")  # as tiktoken


def test_unknown_encoding_is_a_configuration_error():
    with pytest.raises(ConfigurationError, match="unknown encoding 'p50k_base'"):
        QuicktokCounter(encoding="p50k_base")
    with pytest.raises(ConfigurationError):
        QuicktokCounter(encoding="")


def test_counters_satisfy_the_protocol(o200k):
    assert isinstance(o200k, TokenCounter)
    assert isinstance(CharEstimateCounter(), TokenCounter)


# --- messages -------------------------------------------------------------------------------------


def test_a_message_costs_its_text_plus_the_envelope(o200k):
    assert o200k.count_message(user("hello world")) == 2 + o200k.tokens_per_message == 6


def test_text_parts_are_counted_each(o200k):
    message = Message.create("user", [TextPart("hello world"), TextPart("hello world")])
    assert o200k.count_message(message) == 2 * 2 + 4


def test_a_tool_call_costs_its_name_and_json_arguments(o200k):
    message = tool_call("c1", "get_weather", {"city": "Paris", "days": 3}, text="Let me check.")
    expected = (
        o200k.count_text("Let me check.")
        + o200k.count_text("get_weather")
        + o200k.count_text(json.dumps({"city": "Paris", "days": 3}))
        + 4
    )
    assert o200k.count_message(message) == expected


def test_a_tool_result_costs_its_text_or_json(o200k):
    as_text = tool_result("c1", "get_weather", "sunny, 21 degrees")
    as_json = tool_result("c1", "get_weather", {"sky": "sunny", "temp": [21, 23]})
    assert o200k.count_message(as_text) == o200k.count_text("sunny, 21 degrees") + 4
    expected = o200k.count_text(json.dumps({"sky": "sunny", "temp": [21, 23]})) + 4
    assert o200k.count_message(as_json) == expected


def test_each_tool_result_is_its_own_chat_message(o200k):
    message = Message.create("tool", [ToolResultPart("c1", "a", "x"), ToolResultPart("c2", "b", "x")])
    assert o200k.count_message(message) == 2 * o200k.count_text("x") + 2 * 4


def test_files_cost_a_fixed_estimate_whatever_their_size(o200k):
    small = Message.create("user", [FilePart(data=b"x", media_type="image/png")])
    large = Message.create("user", [FilePart(data=b"x" * 1_000_000, media_type="image/png")])
    pdf = Message.create("user", [FilePart(url="https://example.com/a.pdf", media_type="application/pdf")])
    ref = Message.create("user", [AttachmentRef("a1", "notes.txt", "text/plain", 10_000_000)])
    assert o200k.count_message(small) == o200k.count_message(large) == o200k.tokens_per_image + 4
    assert o200k.count_message(pdf) == o200k.count_message(ref) == o200k.tokens_per_file + 4


def test_char_estimate_rounds_up():
    counter = CharEstimateCounter(chars_per_token=4)
    assert counter.count_text("") == 0
    assert counter.count_text("abcd") == 1
    assert counter.count_text("abcde") == 2
    assert counter.count_message(user("abcdefgh")) == 2 + 4
    assert CharEstimateCounter(chars_per_token=2.5).count_text("abcde") == 2


@pytest.mark.parametrize("value", [0, -1, True, "4", float("inf"), float("nan")])
def test_char_estimate_rejects_bad_ratios(value):
    with pytest.raises(ConfigurationError):
        CharEstimateCounter(chars_per_token=value)


# --- nothing kept ---------------------------------------------------------------------------------


class CountingCounter(CharEstimateCounter):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.calls = 0

    def count_text(self, text):
        self.calls += 1
        return super().count_text(text)


def test_edited_content_with_the_same_id_is_recounted():
    counter = CountingCounter()
    original = user("short", id="m1")
    edited = original.replace(parts=(TextPart("a much longer text than before"),))
    assert counter.count_message(original) != counter.count_message(edited)


def test_a_counter_keeps_no_reference_to_what_it_counted():
    """Counts are not remembered: a forgotten message's text must not stay in the process."""
    counter = CountingCounter()
    content = Message.create("user", [TextPart("my locker code is azure falcon ninety seven")]).to_content()
    message = message_from_content(id="m1", role="user", content=content)
    first = counter.count_message(message)
    held = message.parts
    del message
    gc.collect()
    assert [r for r in gc.get_referrers(held) if not isinstance(r, types.FrameType)] == []
    calls = counter.calls
    assert counter.count_message(message_from_content(id="m1", role="user", content=content)) == first
    assert counter.calls > calls  # counted again


def test_unhashable_tool_results_are_counted():
    counter = CountingCounter()
    message = Message.create("tool", [ToolResultPart("c1", "t", {1, 2})])  # a set: unhashable
    assert counter.count_message(message) > 0
    assert counter.count_message(message) > 0


# --- the configured counter -----------------------------------------------------------------------


def test_default_counter_offline_is_quicktok_o200k_and_is_reused():
    counter = get_token_counter()
    assert isinstance(counter, QuicktokCounter)
    assert counter.id == "quicktok:o200k_base"
    assert get_token_counter() is counter


def test_the_setting_picks_the_counter_and_changes_take_effect():
    with override_settings(MEMPROC={"TOKENIZER": "memproc.processors.tokens.CharEstimateCounter"}):
        assert isinstance(get_token_counter(), CharEstimateCounter)
    assert isinstance(get_token_counter(), QuicktokCounter)


def test_the_setting_accepts_class_and_options():
    spec = {"CLASS": "memproc.processors.tokens.QuicktokCounter", "OPTIONS": {"encoding": "cl100k_base"}}
    with override_settings(MEMPROC={"TOKENIZER": spec}):
        counter = get_token_counter()
        assert counter.id == "quicktok:cl100k_base"
        assert get_token_counter() is counter


def test_a_setting_change_forgets_built_counters():
    spec = "memproc.processors.tokens.CharEstimateCounter"
    before = get_token_counter(spec)
    with override_settings(MEMPROC={}):
        pass
    assert get_token_counter(spec) is not before


def test_an_instance_is_used_as_is():
    counter = CharEstimateCounter(chars_per_token=3)
    assert get_token_counter(counter) is counter


@pytest.mark.parametrize(
    "spec",
    [
        "memproc.processors.tokens.NoSuchCounter",
        "builtins.dict",
        {"CLASS": "memproc.processors.tokens.QuicktokCounter", "OPTIONS": {"encoding": "nope"}},
        {"CLASS": "memproc.processors.tokens.QuicktokCounter", "OPTIONS": {"bogus": 1}},
    ],
)
def test_bad_settings_are_configuration_errors(spec):
    with override_settings(MEMPROC={"TOKENIZER": spec}), pytest.raises(ConfigurationError):
        get_token_counter()
