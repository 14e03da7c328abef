"""The message value types' fast paths behave exactly like the general ones they stand in for."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memproc.exceptions import ValidationError
from memproc.messages import FrozenDict, Message, TextPart, ToolCallPart, new_id

WHEN = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)

ids = st.text(alphabet="abcdef0123456789-", min_size=1, max_size=12)
unchecked_changes = st.fixed_dictionaries(
    {},
    optional={
        "id": ids,
        "created_at": st.none() | st.just(WHEN),
        "thread_id": st.none() | ids,
        "resource_id": st.none() | ids,
        "sequence": st.none() | st.integers(min_value=0, max_value=10**9),
    },
)


@given(changes=unchecked_changes)
def test_replace_of_ids_and_times_equals_dataclasses_replace(changes):
    message = Message(
        id="m1",
        role="assistant",
        parts=(TextPart("hi"), ToolCallPart("c1", "lookup", {"q": [1, 2]})),
        created_at=WHEN,
        thread_id="t",
        resource_id="r",
        metadata={"quarantine": {"status": "flagged"}},
        sequence=7,
    )
    fast = message.replace(**changes)
    slow = dataclasses.replace(message, **changes)
    assert type(fast) is Message
    assert fast == slow
    assert fast.sequence == slow.sequence  # not part of equality
    assert fast.metadata is message.metadata  # shared: frozen values need no copy
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.id = "other"  # type: ignore[misc]


def test_replace_of_checked_fields_still_checks_and_freezes():
    message = Message.create("user", "hi")
    with pytest.raises(ValidationError):
        message.replace(role="wizard")
    with pytest.raises(ValidationError):
        message.replace(parts=("not a part",))
    changed = message.replace(metadata={"tags": ["a"]})
    assert isinstance(changed.metadata, FrozenDict)
    assert changed.metadata["tags"] == ("a",)


def test_replace_keeps_a_subclass():
    @dataclasses.dataclass(frozen=True, slots=True)
    class Tagged(Message):
        tag: str = ""

    message = Tagged(id="m1", role="user", parts=(TextPart("hi"),), tag="x")
    changed = message.replace(thread_id="t")
    assert type(changed) is Tagged and changed.tag == "x" and changed.thread_id == "t"


def test_frozen_dict_lookups_match_a_dict():
    data = {"a": 1, "b": {"c": 2}}
    frozen = FrozenDict(data)
    assert frozen.get("a") == 1 and frozen.get("missing") is None and frozen.get("missing", 5) == 5
    assert "a" in frozen and "missing" not in frozen
    assert list(frozen.keys()) == ["a", "b"]
    assert list(frozen.values()) == [1, {"c": 2}]
    assert list(frozen.items()) == list(data.items())
    assert frozen == data
    with pytest.raises(TypeError):
        frozen["a"] = 2  # type: ignore[index]


def test_new_id_is_a_random_uuid4_in_hex():
    made = {new_id() for _ in range(2000)}
    assert len(made) == 2000
    for value in list(made)[:200]:
        parsed = uuid.UUID(hex=value)
        assert parsed.hex == value and len(value) == 32
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122
