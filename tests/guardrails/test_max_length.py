"""MaxLength: over-long input (and, when asked, output) aborts with length and limit; nothing is edited."""

from __future__ import annotations

import pytest

from memproc.exceptions import ConfigurationError, TripWire
from memproc.guardrails import MaxLength

from .conftest import assistant, make_ctx, run_stream, user


@pytest.mark.parametrize(
    "kwargs",
    [
        {"limit": 0},
        {"limit": -5},
        {"limit": 1.5},
        {"limit": True},
        {"limit": 10, "on": "everywhere"},
        {"limit": 10, "on": []},
        {"limit": 10, "retry": "yes"},
    ],
)
def test_bad_options_are_configuration_errors(kwargs):
    with pytest.raises(ConfigurationError):
        MaxLength(**kwargs)


def test_limit_is_keyword_only():
    with pytest.raises(TypeError):
        MaxLength(10)  # type: ignore[misc]


def test_input_within_the_limit_passes_unchanged():
    assert MaxLength(limit=5).process_input(make_ctx(new=[user("hello")])) is None


def test_input_over_the_limit_aborts_with_length_and_limit():
    with pytest.raises(TripWire) as info:
        MaxLength(limit=5).process_input(make_ctx(new=[user("hello!")]))
    assert info.value.reason == "Input longer than 5 characters (6)."
    assert info.value.metadata == {"length": 6, "limit": 5}
    assert info.value.retry is False


def test_input_split_over_several_messages_counts_whole():
    with pytest.raises(TripWire):
        MaxLength(limit=8).process_input(make_ctx(new=[user("hello"), user("world")]))


def test_loaded_history_does_not_count():
    history = [user("x" * 1000), assistant("y" * 1000)]
    assert MaxLength(limit=10).process_input(make_ctx(history, [user("short")])) is None


def test_characters_not_bytes_are_counted():
    assert MaxLength(limit=3).process_input(make_ctx(new=[user("日本語")])) is None


def test_output_is_not_checked_unless_asked():
    ctx = make_ctx(new=[user("hi"), assistant("a" * 50)], phase="output")
    assert MaxLength(limit=10).process_output_result(ctx) is None
    assert run_stream(MaxLength(limit=10), ["a" * 50])[0].text == "a" * 50


def test_long_response_aborts_on_output_with_retry_when_asked():
    guard = MaxLength(limit=10, on=("input", "output"), retry=True)
    with pytest.raises(TripWire) as info:
        guard.process_output_result(make_ctx(new=[user("hi"), assistant("a" * 11)], phase="output"))
    assert info.value.reason == "Response longer than 10 characters (11)."
    assert info.value.retry is True


def test_output_only_leaves_long_input_alone():
    assert MaxLength(limit=3, on="output").process_input(make_ctx(new=[user("long input")])) is None


def test_stream_aborts_at_the_delta_that_crosses_the_limit():
    guard = MaxLength(limit=10, on="output")
    with pytest.raises(TripWire) as info:
        run_stream(guard, ["12345", "67890", "1"])
    assert info.value.metadata == {"length": 11, "limit": 10}


def test_stream_within_the_limit_passes_every_part():
    events = run_stream(MaxLength(limit=10, on="output"), ["12345", "67890"])
    assert [e.text for e in events] == ["12345", "67890", ""]
