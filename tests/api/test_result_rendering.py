"""A turn's result is rendered by one shared serializer (`generate_result_data`): the same JSON as a
new `GenerateResultSerializer` each time, for any result, from any number of threads at once."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from memproc.api.serializers.turns import GenerateResultSerializer, generate_result_data
from memproc.events import GenerateResult, Tripwire
from memproc.messages import Message, TextPart, ToolCallPart, ToolResultPart

texts = st.text(max_size=40)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-1000, 1000) | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
parts = st.one_of(
    st.builds(TextPart, texts),
    st.builds(
        ToolCallPart,
        st.text(min_size=1, max_size=8),
        st.text(min_size=1, max_size=8),
        st.dictionaries(st.text(max_size=5), json_values, max_size=3),
    ),
    st.builds(
        ToolResultPart,
        st.text(min_size=1, max_size=8),
        st.text(min_size=1, max_size=8),
        json_values,
        st.booleans(),
    ),
)
messages = st.builds(
    lambda role, content, thread, when: Message.create(role, content, thread_id=thread, created_at=when),
    st.sampled_from(["user", "assistant", "tool"]),
    st.lists(parts, min_size=1, max_size=3),
    st.none() | st.text(min_size=1, max_size=8),
    st.none() | st.datetimes(timezones=st.just(UTC)),
)
tripwires = st.none() | st.builds(
    Tripwire,
    texts,
    st.text(min_size=1, max_size=10),
    st.sampled_from(["input", "input_step", "output_step", "tool_result", "output", "stream"]),
    st.booleans(),
    st.dictionaries(st.text(max_size=5), json_values, max_size=2),
)
results = st.builds(
    GenerateResult,
    text=texts,
    messages=st.lists(messages, max_size=4),
    tripwire=tripwires,
    usage=st.dictionaries(st.sampled_from(["input_tokens", "output_tokens"]), st.integers(0, 10**6)),
    thread_id=st.none() | st.text(min_size=1, max_size=8),
    resource_id=st.none() | st.text(min_size=1, max_size=8),
    memory=st.dictionaries(st.sampled_from(["history", "recalled"]), st.lists(texts, max_size=3)),
)


@settings(max_examples=150, deadline=None)
@given(results)
def test_the_shared_serializer_renders_what_a_new_one_renders(result):
    assert generate_result_data(result) == GenerateResultSerializer(result).data


def test_threads_rendering_at_once_each_get_their_own_result():
    def result(n: int) -> GenerateResult:
        reply = Message.create("assistant", f"reply {n}", created_at=datetime(2026, 1, 1, tzinfo=UTC))
        return GenerateResult(text=f"reply {n}", messages=[reply], thread_id=f"t{n}", resource_id="r")

    made = {n: result(n) for n in range(8)}
    expected = {n: GenerateResultSerializer(made[n]).data for n in range(8)}
    barrier = threading.Barrier(8)
    wrong: list[int] = []

    def render(n: int) -> None:
        barrier.wait(timeout=10)
        for _ in range(200):
            if generate_result_data(made[n]) != expected[n]:
                wrong.append(n)

    workers = [threading.Thread(target=render, args=(n,)) for n in range(8)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(30)
    assert wrong == []
