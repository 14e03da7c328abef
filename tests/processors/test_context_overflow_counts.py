"""ContextOverflowRecovery's edges: which provider counts it trusts, the counter it counts with, the
options' error messages, and the memory it must keep (a system message memory loaded)."""

from __future__ import annotations

import dataclasses

import pytest

from memproc.exceptions import ConfigurationError, ModelContextLengthError
from memproc.llm.types import ModelRequest
from memproc.processors import ContextOverflowRecovery
from tests.processors.conftest import StubCounter, make_ctx, system, user


def failed(history, new, *, system_messages=()):
    ctx = make_ctx(history, new, system_messages=system_messages)
    return dataclasses.replace(ctx, request=ModelRequest([*system_messages, *history, *new]))


def kept_ids(request):
    return [m.id for m in request.messages]


def ten_of_ten():
    """Ten history messages of 10 tokens and a new one of 10: 110 in all."""
    return failed([user("a", id=f"h{i}", tokens=10) for i in range(10)], [user("now", id="new", tokens=10)])


def test_the_providers_counts_are_used_only_when_it_gave_both_and_the_request_was_over():
    recovery = ContextOverflowRecovery(counter=StubCounter(), margin=0.9, fallback=0.2)
    # Both counts, over the window: keep 110 * 100/200 * 0.9 = 49.5 -> 49: four messages of ten.
    ctx = ten_of_ten()
    retry = recovery.process_api_error(ctx, ModelContextLengthError("x", limit=100, requested=200))
    assert kept_ids(retry) == ["h7", "h8", "h9", "new"]
    # Only the window, only the request's count, or a request the provider counted within its
    # window: its counts say nothing of how far to cut, so the fallback share, 110 * 0.2 = 22.
    for limit, requested in ((100, None), (None, 200), (100, 100), (100, 50), (0, 200)):
        ctx = ten_of_ten()
        retry = recovery.process_api_error(
            ctx, ModelContextLengthError("x", limit=limit, requested=requested)
        )
        assert kept_ids(retry) == ["h9", "new"], (limit, requested)


def test_it_counts_with_the_counter_it_was_given():
    # The stub reads each message's cost from its metadata: the long texts cost 1, the short one 90.
    long_text = " ".join(["word"] * 200)
    history = [user("a", id="h0", tokens=90), *(user(long_text, id=f"h{i}", tokens=1) for i in (1, 2, 3))]
    ctx = failed(history, [user("now", id="new", tokens=1)])
    retry = ContextOverflowRecovery(counter=StubCounter()).process_api_error(
        ctx, ModelContextLengthError("x")
    )
    # 94 counted, aim 47: dropping h0 alone is enough.
    assert kept_ids(retry) == ["h1", "h2", "h3", "new"]


def test_a_system_message_memory_loaded_is_never_dropped():
    recalled_block = system("Earlier, in other threads: ...", id="recalled", tokens=50)
    history = [user("a", id="h0", tokens=10), user("b", id="h1", tokens=10)]
    ctx = make_ctx(history, [user("now", id="new", tokens=10)])
    ctx = dataclasses.replace(
        ctx,
        loaded_ids=ctx.loaded_ids | {"recalled"},
        request=ModelRequest([recalled_block, *history, user("now", id="new", tokens=10)]),
    )
    retry = ContextOverflowRecovery(counter=StubCounter()).process_api_error(
        ctx, ModelContextLengthError("x")
    )
    assert kept_ids(retry) == ["recalled", "new"]


@pytest.mark.parametrize("option", ["margin", "fallback"])
@pytest.mark.parametrize("value", [0, 1, True, "0.5"])
def test_the_options_error_names_the_option_and_the_value(option, value):
    with pytest.raises(ConfigurationError) as raised:
        ContextOverflowRecovery(**{option: value})
    assert str(raised.value) == (
        f"ContextOverflowRecovery({option}=...) must be a number between 0 and 1, not {value!r}"
    )


def test_a_counter_that_is_not_one_is_refused_when_built():
    with pytest.raises(ConfigurationError) as raised:
        ContextOverflowRecovery(counter=42)
    assert str(raised.value) == (
        'ContextOverflowRecovery(counter=...) must be a token counter, a dotted path, or {"CLASS": ..., '
        '"OPTIONS": {...}}'
    )


def test_it_shows_its_shares():
    assert repr(ContextOverflowRecovery(margin=0.8, fallback=0.25)) == (
        "ContextOverflowRecovery(margin=0.8, fallback=0.25)"
    )
