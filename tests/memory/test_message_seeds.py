"""On SQLite a turn offers the messages it saved to the next read of their rows, so the next turn's
history does not parse them again. A message read that way must be indistinguishable from one parsed
from its row: equal, and of the same types all the way down."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.db import connection
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memproc import Agent, Memory, selectors
from memproc.messages import FilePart, FrozenDict, Message, TextPart, ToolCallPart, ToolResultPart
from memproc.models import thread_key
from memproc.testing import ScriptedModel

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "sqlite", reason="seeds are offered on SQLite only"),
]
R = "user-1"

text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=40)
json_scalar = (
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | text
)
json_value = st.recursive(
    json_scalar,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=8,
)
call_id = st.text("abcdef0123456789", min_size=1, max_size=8)
parts = st.lists(
    st.builds(TextPart, text)
    | st.builds(ToolCallPart, call_id, st.just("lookup"), st.dictionaries(text, json_value, max_size=3))
    | st.builds(ToolResultPart, call_id, st.just("lookup"), json_value, st.booleans()),
    min_size=1,
    max_size=3,
)
messages = st.lists(
    st.builds(
        lambda role, parts, metadata: Message.create(role, parts, metadata=metadata),
        st.sampled_from(["user", "assistant", "tool"]),
        parts,
        st.dictionaries(text, json_value, max_size=3),
    ),
    min_size=1,
    max_size=4,
)


def stored_rows(thread_id: str) -> list[tuple[Any, ...]]:
    table = connection.ops.quote_name("memproc_message")
    return selectors._fetch(
        f"SELECT {selectors._message_columns()} FROM {table} m WHERE m.thread_id = %s ORDER BY m.sequence",
        [thread_key(R, thread_id)],
    )


def shape(value: Any) -> Any:
    """`value` with the type of everything in it, so equal values of other types tell apart."""
    if isinstance(value, Message):
        return (shape([getattr(value, name) for name in value.__dataclass_fields__]), type(value))
    if isinstance(value, (TextPart, ToolCallPart, ToolResultPart, FilePart)):
        return (type(value), shape([getattr(value, name) for name in value.__dataclass_fields__]))
    if isinstance(value, FrozenDict):
        return (FrozenDict, sorted((k, shape(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return (type(value), [shape(v) for v in value])
    return (type(value), repr(value))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=messages)
def test_a_seeded_message_is_the_message_its_row_parses_to(batch: list[Message]) -> None:
    thread_id = uuid.uuid4().hex
    Memory().save_messages(batch, thread_id=thread_id, resource_id=R)
    rows = stored_rows(thread_id)
    assert len(rows) == len(batch)
    assert all(row in selectors._SEEDS for row in rows)  # plain JSON values: every message offered
    for row in rows:
        read = selectors._message_from_raw(row)
        parsed = selectors._message_parsed(row)
        assert read == parsed
        assert shape(read) == shape(parsed)
        assert read.sequence == parsed.sequence
    assert not any(row in selectors._SEEDS for row in rows)  # each seed was taken by its read


def test_the_next_turn_parses_none_of_the_messages_the_last_one_saved(monkeypatch) -> None:
    agent = Agent(
        id="seeds", model=ScriptedModel(["One.", "Two.", "Three."]), memory=Memory(last_messages=10)
    )
    agent.generate("first", thread_id="t1", resource_id=R)
    parsed: list[tuple[Any, ...]] = []
    real = selectors._message_parsed

    def counting(row):
        parsed.append(row)
        return real(row)

    monkeypatch.setattr(selectors, "_message_parsed", counting)
    agent.generate("second", thread_id="t1", resource_id=R)
    result = agent.generate("third", thread_id="t1", resource_id=R)
    assert parsed == []
    assert [m.text for m in result.prompt if m.role != "system"] == [
        "first",
        "One.",
        "second",
        "Two.",
        "third",
    ]


def test_a_message_whose_json_changes_its_types_is_not_offered() -> None:
    """Bytes are stored as base64 text, a str subclass as plain str: parsing gives other types."""

    class Label(str):
        pass

    row = ("m1", thread_key(R, "t1"), R, "user", "{}", "2026-12-02 04:00:00.000001", 1)
    for message in (
        Message.create("user", [FilePart(data=b"\x00\x01", media_type="application/octet-stream")]),
        Message.create("user", [TextPart(Label("hi"))]),
        Message.create("user", "hi", metadata={"label": Label("x")}),
    ):
        selectors.message_seed(row, message)
        assert row not in selectors._SEEDS


def test_seeds_are_bounded() -> None:
    message = Message.create("user", "hi")
    for n in range(selectors._SEEDS_MAX * 2 + 1):
        selectors.message_seed(("m", "k", R, "user", "{}", "2026-12-02 04:00:00", n), message)
        assert len(selectors._SEEDS) <= selectors._SEEDS_MAX
    selectors._SEEDS.clear()


def test_stored_text_of_a_utc_time_parses_as_before() -> None:
    """`_datetime`'s fast path and Django's parser agree, zone included; odd text takes the old path."""
    from datetime import UTC, datetime, timedelta, timezone

    assert selectors._datetime("2026-12-02 04:00:00.000123") == datetime(
        2026, 12, 2, 4, 0, 0, 123, tzinfo=UTC
    )
    assert selectors._datetime("2026-12-02 04:00:00").tzinfo is UTC
    assert selectors._datetime("2026-12-02T05:00:00+01:00") == datetime(2026, 12, 2, 4, tzinfo=UTC)
    assert selectors._datetime("2026-12-02T05:00:00+01:00").utcoffset() == timedelta(hours=1)
    assert selectors._datetime("2026-12-02") == datetime(2026, 12, 2, tzinfo=UTC)
    naive = datetime(2026, 12, 2, 4)
    assert selectors._datetime(naive) == naive.replace(tzinfo=UTC)
    aware = datetime(2026, 12, 2, 4, tzinfo=timezone(timedelta(hours=2)))
    assert selectors._datetime(aware) is aware
    assert selectors._datetime(None) is None
