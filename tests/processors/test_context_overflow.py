"""ContextOverflowRecovery alone: which messages it drops from a failed request, and how far."""

from __future__ import annotations

import dataclasses

import pytest

from memproc.exceptions import ConfigurationError, ModelContextLengthError, ModelUnavailableError
from memproc.llm.types import ModelRequest
from memproc.processors import ContextOverflowRecovery
from tests.processors.conftest import StubCounter, assistant, make_ctx, system, tool_call, tool_result, user


def failed(history, new, *, system_messages=()):
    ctx = make_ctx(history, new, system_messages=system_messages)
    return dataclasses.replace(ctx, request=ModelRequest([*system_messages, *history, *new]))


def too_long(limit=None, requested=None):
    return ModelContextLengthError("too long", limit=limit, requested=requested)


def recovery(**kwargs):
    return ContextOverflowRecovery(counter=StubCounter(), **kwargs)


def kept_ids(request):
    return [m.id for m in request.messages]


def test_drops_the_oldest_history_until_within_the_providers_window_scaled_to_the_counter():
    history = [user("a", id=f"h{i}", tokens=10) for i in range(6)]
    new = [user("now", id="new", tokens=10)]
    ctx = failed(history, new, system_messages=[system("sys", id="sys", tokens=10)])
    # 80 counted here; the provider counted 160 against a window of 100: keep 80 * 100/160 * 0.9 = 45.
    retry = recovery().process_api_error(ctx, too_long(limit=100, requested=160))
    assert kept_ids(retry) == ["sys", "h4", "h5", "new"]  # 40 tokens
    assert ctx.state["dropped"] == {"h0", "h1", "h2", "h3"}


def test_without_the_providers_counts_it_keeps_the_fallback_share():
    history = [user("a", id=f"h{i}", tokens=10) for i in range(8)]
    ctx = failed(history, [user("now", id="new", tokens=20)])
    retry = recovery(fallback=0.5).process_api_error(ctx, too_long())
    assert kept_ids(retry) == ["h5", "h6", "h7", "new"]  # 50 of 100: at the aim, not below it


def test_a_tool_call_and_its_result_are_dropped_together_and_input_and_system_never():
    history = [
        tool_call("c1", id="call", tokens=30),
        tool_result("c1", id="result", tokens=5),
        assistant("ok", id="a1", tokens=5),
    ]
    new = [user("now", id="new", tokens=100)]
    ctx = failed(history, new, system_messages=[system("sys", id="sys", tokens=100)])
    retry = recovery().process_api_error(ctx, too_long(limit=10, requested=1000))
    assert kept_ids(retry) == ["sys", "new"]  # far from the aim, but nothing else may go


def test_nothing_to_drop_or_another_error_lets_the_error_stand():
    ctx = failed([], [user("now", id="new", tokens=100)])
    assert recovery().process_api_error(ctx, too_long(limit=10, requested=100)) is None
    ctx = failed([user("old", id="h", tokens=10)], [user("now", id="new", tokens=10)])
    assert recovery().process_api_error(ctx, ModelUnavailableError("down")) is None


def test_later_calls_leave_the_dropped_history_out():
    processor = recovery()
    history = [user("a", id=f"h{i}", tokens=10) for i in range(4)]
    ctx = failed(history, [user("now", id="new", tokens=10)])
    processor.process_api_error(ctx, too_long())
    step = dataclasses.replace(make_ctx(history, [user("now", id="new")]), state=ctx.state)
    assert [m.id for m in processor.process_input_step(step)] == ["h3", "new"]
    assert processor.process_input_step(make_ctx(history)) is None  # a turn with no overflow


@pytest.mark.parametrize("option", ["margin", "fallback"])
@pytest.mark.parametrize("value", [0, 1, 1.5, -0.1, True, "0.5"])
def test_shares_must_be_between_0_and_1(option, value):
    with pytest.raises(ConfigurationError, match=option):
        ContextOverflowRecovery(**{option: value})
