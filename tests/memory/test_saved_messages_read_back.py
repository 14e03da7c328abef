"""A message that was saved reads back as what was saved: id, role, parts, text, metadata, thread,
resource, its time (aware, in UTC) and its sequence, and with the same types all the way down whichever
public read returns it (`Memory.recall`, its semantic recall, the next turn's prompt,
`messages_recent`, `messages_by_id`), on SQLite and on PostgreSQL alike."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.db import transaction
from django.test import override_settings
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memproc import Memory
from memproc.llm.types import ModelResponse, ToolCall
from memproc.messages import (
    AttachmentRef,
    FilePart,
    FrozenDict,
    Message,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)
from memproc.models import Message as StoredMessage
from memproc.models import Thread, thread_key
from memproc.selectors.messages import messages_by_id, messages_recent
from memproc.selectors.threads import thread_read
from memproc.services.messages import messages_insert
from memproc.tools import tool

pytestmark = pytest.mark.django_db
R = "user-1"

text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=40)
json_scalar = (
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    # PostgreSQL's jsonb keeps a number's digits, not its type: a float of 1e16 or more, which Python
    # writes with an exponent ("1e+16"), reads back as an int there. Smaller ones keep their fraction.
    | st.floats(min_value=-1e15, max_value=1e15)
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
zones = st.sampled_from(
    [UTC, timezone(timedelta(hours=1)), timezone(-timedelta(hours=7, minutes=30)), ZoneInfo("Europe/Paris")]
)
created_at = st.none() | st.datetimes(
    min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1), timezones=zones
)
messages = st.lists(
    st.builds(
        lambda role, parts, metadata, created_at: Message.create(
            role, parts, metadata=metadata, created_at=created_at
        ),
        st.sampled_from(["user", "assistant", "tool"]),
        parts,
        st.dictionaries(text, json_value, max_size=3),
        created_at,
    ),
    min_size=1,
    max_size=4,
)


def shape(value: Any) -> Any:
    """`value` with the type of everything in it, so that equal values of other types tell apart."""
    if isinstance(value, Message):  # its sequence is asserted apart: a turn's result has none
        fields = [getattr(value, name) for name in value.__dataclass_fields__ if name != "sequence"]
        return (type(value), shape(fields))
    if isinstance(value, (TextPart, ToolCallPart, ToolResultPart, FilePart, AttachmentRef)):
        return (type(value), shape([getattr(value, name) for name in value.__dataclass_fields__]))
    if isinstance(value, FrozenDict):
        return (FrozenDict, sorted((k, shape(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return (type(value), [shape(v) for v in value])
    if isinstance(value, datetime):
        return (type(value), value, value.utcoffset())
    return (type(value), repr(value))


def stored_times(thread_id: str) -> dict[str, datetime]:
    rows = StoredMessage.objects.filter(thread=thread_key(R, thread_id)).values_list(
        "public_id", "created_at"
    )
    return dict(rows)


def every_read(thread_id: str, ids: list[str]) -> dict[str, list[Message]]:
    """The messages `ids` of a thread as each public read of the whole thread returns them."""
    key = thread_key(R, thread_id)
    last = Thread.objects.get(pk=key).last_sequence
    wanted = set(ids)
    reads = {
        "recall": Memory(last_messages=last).recall(thread_id=thread_id, resource_id=R),
        "recall again": Memory(last_messages=last).recall(thread_id=thread_id, resource_id=R),
        "recall by date": Memory(last_messages=last).recall(
            thread_id=thread_id, resource_id=R, date_range=(None, None)
        ),
        "messages_recent": messages_recent(thread_key=key, limit=last),
        "thread_read": thread_read(thread_key=key, history=last)[2] or [],
        "messages_by_id": sorted(
            messages_by_id(resource_id=R, ids=ids).values(), key=lambda m: m.sequence or 0
        ),
    }
    return {name: [m for m in read if m.id in wanted] for name, read in reads.items()}


def assert_utc(moment: datetime | None) -> None:
    assert moment is not None and moment.tzinfo is not None and moment.utcoffset() == timedelta(0)


# --- whatever was saved ------------------------------------------------------------------------------


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=messages)
def test_saved_messages_read_back_equal_and_of_the_same_types_through_every_read(
    batch: list[Message],
) -> None:
    thread_id = uuid.uuid4().hex  # hypothesis runs every example in the test's one transaction
    Memory().save_messages(batch, thread_id=thread_id, resource_id=R, embed=False)
    times = stored_times(thread_id)
    expected = [
        m.replace(thread_id=thread_id, resource_id=R, created_at=times[m.id], sequence=i)
        for i, m in enumerate(batch, start=1)
    ]
    reads = every_read(thread_id, [m.id for m in batch])
    reference = reads["messages_by_id"]  # the ORM's JSON decoding: the plain read
    for name, read in reads.items():
        assert read == expected, name
        assert [m.sequence for m in read] == list(range(1, len(batch) + 1)), name
        assert [shape(m) for m in read] == [shape(m) for m in reference], name
    for m, saved in zip(reference, batch, strict=True):
        assert_utc(m.created_at)
        assert m.text == saved.text
        if saved.created_at is not None:
            # In UTC: Python never finds a time in a repeated (DST) hour equal to one of another zone.
            assert m.created_at == saved.created_at.astimezone(UTC)


def test_a_turns_messages_with_tool_calls_read_back_as_the_turn_returned_them(make_agent, model):
    @tool
    def lookup(city: str, days: int) -> dict:
        """The weather in a city."""
        return {"city": city, "days": days, "temp": 3.5, "tags": ["cold", "dry"], "ok": True, "none": None}

    agent = make_agent(tools=[lookup], memory=Memory(last_messages=20))
    model.add(ModelResponse(tool_calls=[ToolCall("c1", "lookup", {"city": "Oslo", "days": 2})]), "Cold.")
    result = agent.generate("Weather in Oslo?", thread_id="t1", resource_id=R)
    saved = result.messages
    assert [m.role for m in saved] == ["user", "assistant", "tool", "assistant"]
    call, answer = saved[1].parts[0], saved[2].parts[0]
    assert call == ToolCallPart("c1", "lookup", {"city": "Oslo", "days": 2})
    assert answer == ToolResultPart(
        "c1",
        "lookup",
        {"city": "Oslo", "days": 2, "temp": 3.5, "tags": ["cold", "dry"], "ok": True, "none": None},
    )

    model.add("Warm up.")
    agent.generate("And now?", thread_id="t1", resource_id=R)
    prompt = [m for m in model.requests[-1].messages if m.role != "system"][:-1]
    reads = every_read("t1", [m.id for m in saved])
    reads["next turn's prompt"] = prompt
    for name, read in reads.items():
        assert read == saved, name
        assert [shape(m) for m in read] == [shape(m) for m in saved], name
        assert [m.sequence for m in read] == [1, 2, 3, 4], name
        assert [m.text for m in read] == ["Weather in Oslo?", "", "", "Cold."], name
    for m in saved:
        assert_utc(m.created_at)
        assert m.created_at == StoredMessage.objects.get(public_id=m.id).created_at
    assert [m.created_at for m in saved] == sorted(m.created_at for m in saved)


def test_values_that_json_cannot_keep_read_back_as_json_gives_them_whichever_read():
    """A str subclass reads back as str; bytes (here saved without offloading) as base64 text."""

    class Label(str):
        pass

    batch = [
        Message.create("user", [TextPart(Label("hi"))]),
        Message.create("user", "hello", metadata={"label": Label("x")}),
        Message.create("user", [FilePart(data=b"\x00\x01", media_type="application/octet-stream")]),
    ]
    Memory().create_thread(resource_id=R, thread_id="t1")
    with transaction.atomic():
        messages_insert(thread_id="t1", resource_id=R, messages=batch)
    reads = every_read("t1", [m.id for m in batch])
    for name, read in reads.items():
        assert [shape(m) for m in read] == [shape(m) for m in reads["messages_by_id"]], name
        assert type(read[0].parts[0].text) is str, name
        assert read[0].text == "hi", name
        assert type(read[1].metadata["label"]) is str and read[1].metadata == {"label": "x"}, name
        assert read[2].parts[0] == FilePart(data="AAE=", media_type="application/octet-stream"), name


def test_an_inline_file_reads_back_as_its_attachment_reference():
    data = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64
    [saved] = Memory().save_messages(
        [
            Message.create(
                "user", [TextPart("see this"), FilePart(data=data, media_type="image/png", name="a.png")]
            )
        ],
        thread_id="t1",
        resource_id=R,
    )
    ref = saved.parts[1]
    assert isinstance(ref, AttachmentRef)
    assert (ref.name, ref.media_type, ref.size) == ("a.png", "image/png", len(data))
    for name, [read] in every_read("t1", [saved.id]).items():
        assert read.parts == (TextPart("see this"), ref), name
        assert shape(read.parts) == shape(saved.parts), name


# --- times ------------------------------------------------------------------------------------------

INSTANTS = [
    datetime(2026, 12, 2, 4, 0, 0, 123, tzinfo=UTC),
    datetime(2026, 12, 2, 4, 0, 0, tzinfo=UTC),  # no microseconds
    datetime(2026, 12, 2, 5, 0, 0, 1, tzinfo=timezone(timedelta(hours=1))),  # another offset
    datetime(2026, 10, 25, 2, 30, tzinfo=ZoneInfo("Europe/Paris"), fold=1),  # the repeated DST hour
    datetime(2026, 3, 29, 1, 59, 59, 999999, tzinfo=UTC),  # the second before a DST change
    datetime(2026, 3, 29, 2, 30, tzinfo=UTC),  # as Paris time, in the hour the change skips
]


@pytest.mark.parametrize("current_zone", ["UTC", "Europe/Paris", "America/New_York"])
def test_explicit_times_read_back_as_the_same_instant_in_utc(make_agent, model, current_zone):
    batch = [Message.create("user", f"at {i}", created_at=moment) for i, moment in enumerate(INSTANTS)]
    with override_settings(TIME_ZONE=current_zone):
        Memory().save_messages(batch, thread_id="t1", resource_id=R, embed=False)
        reads = every_read("t1", [m.id for m in batch])
        model.add("ok")
        make_agent(memory=Memory(last_messages=len(batch))).generate("next", thread_id="t1", resource_id=R)
    reads["next turn's prompt"] = [m for m in model.requests[-1].messages if m.role != "system"][:-1]
    expected = {m.id: m.created_at.astimezone(UTC) for m in batch}
    for name, read in reads.items():
        assert {m.id: m.created_at for m in read} == expected, name
        for m in read:
            assert_utc(m.created_at)


def test_times_given_by_the_save_are_aware_utc_in_save_order():
    before = datetime.now(UTC)
    batch = [Message.create("user", f"m{i}") for i in range(3)]
    Memory().save_messages(batch, thread_id="t1", resource_id=R, embed=False)
    after = datetime.now(UTC)
    for name, read in every_read("t1", [m.id for m in batch]).items():
        times = [m.created_at for m in read]
        assert all(before <= t <= after + timedelta(seconds=1) for t in times), name
        assert times == sorted(set(times)), name  # distinct and increasing
        for t in times:
            assert_utc(t)
        assert times == [stored_times("t1")[m.id] for m in batch], name


# --- reads after other writes -----------------------------------------------------------------------


def test_an_edited_message_reads_back_edited():
    memory = Memory(last_messages=5)
    [saved] = memory.save_messages([Message.create("user", "before")], thread_id="t1", resource_id=R)
    assert [m.text for m in memory.recall(thread_id="t1", resource_id=R)] == ["before"]
    memory.update_messages([{"id": saved.id, "content": "after"}])
    for name, [read] in every_read("t1", [saved.id]).items():
        assert read.text == "after" and read.id == saved.id and read.sequence == 1, name


def test_a_message_deleted_and_saved_again_reads_back_as_saved_again():
    memory = Memory(last_messages=5)
    created = datetime(2026, 12, 2, 4, tzinfo=UTC)
    first = Message.create("user", "first", id="m1", created_at=created)
    memory.save_messages([first], thread_id="t1", resource_id=R)
    assert memory.recall(thread_id="t1", resource_id=R) == [first.replace(thread_id="t1", resource_id=R)]
    memory.delete_messages(["m1"])
    again = Message.create("user", "second", id="m1", created_at=created, metadata={"v": 2})
    memory.save_messages([again], thread_id="t1", resource_id=R)
    for name, [read] in every_read("t1", ["m1"]).items():
        assert read == again.replace(thread_id="t1", resource_id=R), name
        assert read.sequence == 2, name


def test_a_save_that_rolled_back_leaves_nothing_to_read_and_the_next_save_reads_back():
    memory = Memory(last_messages=5)
    memory.create_thread(resource_id=R, thread_id="t1")
    created = datetime(2026, 12, 2, 4, tzinfo=UTC)
    with pytest.raises(RuntimeError), transaction.atomic():
        memory.save_messages(
            [Message.create("user", "ghost", id="m1", created_at=created)], thread_id="t1", resource_id=R
        )
        raise RuntimeError("roll back")
    assert memory.recall(thread_id="t1", resource_id=R) == []
    real = Message.create("assistant", "real", id="m1", created_at=created)
    memory.save_messages([real], thread_id="t1", resource_id=R)
    for name, [read] in every_read("t1", ["m1"]).items():
        assert read == real.replace(thread_id="t1", resource_id=R) and read.role == "assistant", name


def test_many_messages_saved_at_once_and_over_many_turns_all_read_back(make_agent, model):
    batch = [Message.create("user" if i % 2 else "assistant", f"m{i}", metadata={"i": i}) for i in range(600)]
    Memory().save_messages(batch, thread_id="t1", resource_id=R, embed=False)
    agent = make_agent(memory=Memory(last_messages=5))
    for i in range(300):
        model.add(f"a{i}")
        agent.generate(f"u{i}", thread_id="t1", resource_id=R)
    stored = list(StoredMessage.objects.filter(thread=thread_key(R, "t1")).order_by("sequence"))
    assert len(stored) == 1200
    everything = Memory(last_messages=1200).recall(thread_id="t1", resource_id=R)
    assert [(m.id, m.text, m.sequence, m.created_at) for m in everything] == [
        (row.public_id, row.text, row.sequence, row.created_at) for row in stored
    ]
    assert [m.metadata for m in everything[:600]] == [{"i": i} for i in range(600)]
    assert [m.text for m in model.requests[-1].messages if m.role != "system"] == [
        "a296",
        "u297",
        "a297",
        "u298",
        "a298",
        "u299",
    ]


def test_messages_found_by_semantic_recall_read_back_as_saved(committing):
    memory = Memory(last_messages=0, semantic_recall={"top_k": 1, "message_range": 1, "scope": "thread"})
    created = datetime(2026, 12, 2, 4, tzinfo=UTC)
    batch = [
        Message.create("user", "my bees live in the garden", created_at=created, metadata={"n": 1}),
        Message.create("assistant", "the hive by the pear tree?", created_at=created + timedelta(seconds=1)),
        Message.create("user", "yes, ten thousand of them", created_at=created + timedelta(seconds=2)),
    ]
    with committing():
        memory.save_messages(batch, thread_id="t1", resource_id=R)
    found = memory.recall(thread_id="t1", resource_id=R, query="the hive by the pear tree?")
    assert found == [m.replace(thread_id="t1", resource_id=R) for m in batch]  # the hit and its neighbours
    assert [shape(m) for m in found] == [
        shape(m) for m in every_read("t1", [m.id for m in batch])["messages_by_id"]
    ]
    for m in found:
        assert_utc(m.created_at)
