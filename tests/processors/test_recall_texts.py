"""What recall writes and refuses, word for word: the options both recall and the search tool check,
the block of other threads' messages (its header, order and the offsets a guardrail cuts by), and the
quarantine flag. Mutation testing found these unread (docs/testing.md)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memproc.exceptions import ConfigurationError
from memproc.messages import Message
from memproc.processors.memory_search import MemorySearch
from memproc.processors.semantic_recall import (
    CROSS_THREAD_HEADER,
    SemanticRecall,
    cross_thread_message,
    is_quarantined,
    recalled_line,
)


def at(hour: int, minute: int = 0) -> datetime:
    return datetime(2026, 12, 3, hour, minute, tzinfo=UTC)


@pytest.mark.parametrize("owner", [SemanticRecall, MemorySearch])
@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("top_k", 0, "(top_k=...) must be an integer >= 1"),
        ("top_k", -3, "(top_k=...) must be an integer >= 1"),
        ("top_k", True, "(top_k=...) must be an integer >= 1"),
        ("top_k", 2.0, "(top_k=...) must be an integer >= 1"),
        ("scope", "all", "(scope=...) must be 'resource' or 'thread'"),
        ("scope", "", "(scope=...) must be 'resource' or 'thread'"),
        ("threshold", 1.0001, "(threshold=...) is a cosine similarity in [-1, 1]"),
        ("threshold", -1.0001, "(threshold=...) is a cosine similarity in [-1, 1]"),
    ],
)
def test_bad_options_name_their_owner_and_the_rule(owner, option, value, message):
    with pytest.raises(ConfigurationError) as raised:
        owner(**{option: value})
    assert str(raised.value) == owner.__name__ + message


@pytest.mark.parametrize("owner", [SemanticRecall, MemorySearch])
def test_the_edges_of_the_options_are_accepted(owner):
    for kwargs in (
        {"top_k": 1},
        {"scope": "thread"},
        {"scope": "resource"},
        {"threshold": -1.0},
        {"threshold": 1.0},
        {"threshold": 0},
    ):
        made = owner(**kwargs)
        for name, value in kwargs.items():
            assert getattr(made, name) == value
    assert owner(include_archived=1).include_archived is True


@pytest.mark.parametrize(
    ("message_range", "before", "after"),
    [(0, 0, 0), (3, 3, 3), ({"before": 2}, 2, 0), ({"after": 1}, 0, 1), ({"before": 1, "after": 4}, 1, 4)],
)
def test_message_range_sets_the_neighbours_on_each_side(message_range, before, after):
    recall = SemanticRecall(message_range=message_range)
    assert (recall.before, recall.after) == (before, after)


@pytest.mark.parametrize("message_range", [-1, {"before": -1}, {"after": -2}])
def test_a_negative_message_range_is_refused(message_range):
    with pytest.raises(ConfigurationError) as raised:
        SemanticRecall(message_range=message_range)
    assert str(raised.value) == "SemanticRecall(message_range=...) must be >= 0"


def test_the_other_threads_block_word_for_word():
    late = Message.create("user", "Second in b", thread_id="b", created_at=at(10, 5))
    early = Message.create("assistant", "First in b\nwith a second line", thread_id="b", created_at=at(9))
    other = Message.create("user", "Only in a", thread_id="a", created_at=at(23, 59))
    block = cross_thread_message([late, other, early])
    assert block.role == "system" and block.id == "semantic-recall:other-threads"
    assert block.text == (
        CROSS_THREAD_HEADER
        + "\n- [2026-12-03 23:59] user: Only in a"
        + "\n- [2026-12-03 09:00] assistant: First in b\n  with a second line"
        + "\n- [2026-12-03 10:05] user: Second in b"
    )
    where = block.metadata["recalled"]
    assert [(w["id"], w["thread_id"]) for w in where] == [(other.id, "a"), (early.id, "b"), (late.id, "b")]
    for entry, message in zip(where, [other, early, late], strict=True):
        assert block.text[entry["start"] : entry["end"]] == recalled_line(message)
        assert block.text[entry["start"] - 1] == "\n"
    assert where[-1]["end"] == len(block.text)


def test_a_message_without_a_time_comes_first_in_its_thread_with_an_empty_stamp():
    timed = Message.create("user", "timed", thread_id="t", created_at=at(8))
    untimed = Message.create("user", "untimed", thread_id="t")
    untimed = untimed.replace(created_at=None)
    block = cross_thread_message([timed, untimed])
    assert block.text.split("\n")[1:] == ["- [] user: untimed", "- [2026-12-03 08:00] user: timed"]


def test_an_empty_block_is_the_header_alone():
    block = cross_thread_message([])
    assert block.text == CROSS_THREAD_HEADER and list(block.metadata["recalled"]) == []


@pytest.mark.parametrize(
    ("flag", "quarantined"),
    [
        ({"status": "flagged"}, True),
        ({"status": "confirmed"}, True),
        ({"status": "cleared"}, False),
        ({"status": "FLAGGED"}, False),
        ({}, False),
        ("flagged", False),
        (None, False),
    ],
)
def test_the_quarantine_flag(flag, quarantined):
    metadata = {} if flag is None else {"quarantine": flag}
    assert is_quarantined(Message.create("user", "x", metadata=metadata)) is quarantined


def test_recalls_defaults_follow_mastras():
    recall = SemanticRecall()
    assert (recall.top_k, recall.before, recall.after, recall.scope) == (4, 1, 1, "resource")
    assert recall.threshold is None and recall.include_archived is False and recall.vector_store is None


def test_the_embedder_and_store_given_are_the_ones_used():
    from memproc.testing.embedders import HashEmbedder

    embedder, store = HashEmbedder(), object()
    recall = SemanticRecall(embedder=embedder, vector_store=store)
    assert recall.embedder is embedder and recall.vector_store is store


def test_a_message_without_a_thread_sorts_before_every_thread():
    threadless = Message.create("user", "nowhere", created_at=at(12))
    named = Message.create("user", "in A", thread_id="A", created_at=at(1))
    lines = cross_thread_message([named, threadless]).text.split("\n")[1:]
    assert lines == ["- [2026-12-03 12:00] user: nowhere", "- [2026-12-03 01:00] user: in A"]
