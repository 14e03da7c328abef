"""TurnInfo as its two readers see it: the turn result's `memory` (`as_dict`) and the turn record's
manifest (`manifest`), key by key, with what is left out when nothing was recorded."""

from __future__ import annotations

import pytest

from memproc.processors.compaction import CompactionDue
from memproc.processors.turn import Turn
from memproc.processors.turn_info import (
    HistoryEntry,
    MemorySearchRecord,
    RecalledHit,
    SummaryUsed,
    TokenCount,
    TurnInfo,
    WorkingMemoryRead,
)


def full_info() -> TurnInfo:
    """Every field recorded, with two searches (the first refused) and two timed hooks."""
    info = TurnInfo(
        working_memory="# Notes\n- name: Ada",
        working_memory_version=WorkingMemoryRead(scope="resource", key="default", version=7),
        history=[HistoryEntry("m1", "user", "hi"), HistoryEntry("m2", "assistant", "hello")],
        echoed=2,
        summary=SummaryUsed(covered_sequence=41, version=3),
        recalled=[RecalledHit("m9", "t-other", "Oslo is grey", 0.875), RecalledHit("m10", None, "ok", None)],
        recall_error=True,
        searches=[
            MemorySearchRecord(scope="thread", query_chars=0, error="empty query"),
            MemorySearchRecord(scope="resource", query_chars=12, hits=[("m9", "t-other", 0.5)]),
        ],
        tokens=TokenCount(total=900, limit=1000, dropped=4),
        withheld=[{"guardrail": "pii", "id": "m3"}],
    )
    info.time("history", "process_input", 1.25)
    info.time("guard", "process_output_result", 2.0)
    return info


def test_the_memory_report_holds_every_recorded_field_in_its_json_shape():
    assert full_info().as_dict() == {
        "working_memory": "# Notes\n- name: Ada",
        "working_memory_version": {"scope": "resource", "key": "default", "version": 7},
        "history": [
            {"id": "m1", "role": "user", "text": "hi"},
            {"id": "m2", "role": "assistant", "text": "hello"},
        ],
        "echoed": 2,
        "summary": {"covered_sequence": 41, "version": 3},
        "recall_error": True,
        "recalled": [
            {"id": "m9", "thread_id": "t-other", "text": "Oslo is grey", "score": 0.875},
            {"id": "m10", "thread_id": None, "text": "ok", "score": None},
        ],
        "searches": [
            {"scope": "thread", "query_chars": 0, "hits": [], "withheld": [], "error": "empty query"},
            {
                "scope": "resource",
                "query_chars": 12,
                "hits": [{"id": "m9", "thread_id": "t-other", "score": 0.5}],
                "withheld": [],
            },
        ],
        "tokens": {"total": 900, "limit": 1000, "dropped": 4},
        "withheld": [{"guardrail": "pii", "id": "m3"}],
        "processors": {"history process_input": (1.25, 1), "guard process_output_result": (2.0, 1)},
    }


def test_nothing_recorded_is_an_empty_report_and_a_manifest_of_empty_values():
    info = TurnInfo()
    assert info.as_dict() == {}
    assert info.manifest() == {
        "history": [],
        "recalled": [],
        "recall_error": False,
        "echoed": 0,
        "working_memory": None,
        "tokens": None,
        "processors": [],
    }


def test_an_empty_window_and_an_empty_recall_are_reported_unlike_none():
    """A client tells "no recall ran" (key absent) from "recall found nothing" (an empty list)."""
    assert TurnInfo(history=[], recalled=[]).as_dict() == {"history": [], "recalled": []}
    assert TurnInfo(working_memory="").as_dict() == {"working_memory": ""}


def test_the_manifest_holds_ids_and_numbers_never_text():
    manifest = full_info().manifest()
    assert manifest == {
        "history": ["m1", "m2"],
        "recalled": [
            {"id": "m9", "thread_id": "t-other", "score": 0.875},
            {"id": "m10", "thread_id": None, "score": None},
        ],
        "recall_error": True,
        "echoed": 2,
        "working_memory": {"scope": "resource", "key": "default", "version": 7},
        "tokens": {"total": 900, "limit": 1000, "dropped": 4},
        "processors": [
            {"processor": "history", "hook": "process_input", "ms": 1.25, "calls": 1},
            {"processor": "guard", "hook": "process_output_result", "ms": 2.0, "calls": 1},
        ],
        "searches": [
            {"scope": "thread", "query_chars": 0, "hits": [], "withheld": [], "error": "empty query"},
            {
                "scope": "resource",
                "query_chars": 12,
                "hits": [{"id": "m9", "thread_id": "t-other", "score": 0.5}],
                "withheld": [],
            },
        ],
    }
    assert "Ada" not in repr(manifest) and "Oslo" not in repr(manifest)


def test_hook_times_add_up_per_processor_and_hook_and_the_manifest_rounds_them():
    info = TurnInfo()
    info.time("guard", "process_output_stream", 0.0004)
    info.time("guard", "process_output_stream", 1.5)
    info.time("guard", "process_output_stream", 2.25)
    info.time("guard", "process_input", 3.0)
    assert info.as_dict()["processors"] == {
        "guard process_output_stream": (pytest.approx(3.7504), 3),
        "guard process_input": (3.0, 1),
    }
    assert info.manifest()["processors"] == [
        {"processor": "guard", "hook": "process_output_stream", "ms": 3.75, "calls": 3},
        {"processor": "guard", "hook": "process_input", "ms": 3.0, "calls": 1},
    ]
    # Rounded to the microsecond, not further.
    info = TurnInfo()
    info.time("p", "h", 1.23456)
    assert info.manifest()["processors"][0]["ms"] == 1.235


def test_withheld_hits_go_to_the_latest_search_only():
    info = TurnInfo(
        searches=[
            MemorySearchRecord(scope="thread", query_chars=3, hits=[("a", "t", 0.9)]),
            MemorySearchRecord(scope="thread", query_chars=3, hits=[("a", "t", 0.9)]),
            MemorySearchRecord(scope="thread", query_chars=4, hits=[("b", "t", 0.8), ("c", "t", 0.7)]),
        ]
    )
    info.search_withheld(["b"])
    info.search_withheld(["c"])
    assert [s.withheld for s in info.searches] == [[], [], ["b", "c"]]
    assert info.as_dict()["searches"][2]["withheld"] == ["b", "c"]


def test_withheld_hits_without_a_search_are_not_recorded():
    info = TurnInfo()
    info.search_withheld(["b"])
    assert info.searches == []
    assert info.as_dict() == {}


def test_a_search_record_without_an_error_has_no_error_key():
    record = MemorySearchRecord(scope="resource", query_chars=5, hits=[("x", None, 0.25)], withheld=["x"])
    assert record.as_dict() == {
        "scope": "resource",
        "query_chars": 5,
        "hits": [{"id": "x", "thread_id": None, "score": 0.25}],
        "withheld": ["x"],
    }
    # The report is a copy: changing it leaves the record alone.
    record.as_dict()["withheld"].append("y")
    assert record.withheld == ["x"]


def test_the_reported_withheld_list_is_a_copy():
    info = TurnInfo(withheld=[{"id": "m1"}])
    info.as_dict()["withheld"].append({"id": "m2"})
    assert info.withheld == [{"id": "m1"}]


def test_the_turn_memory_report_adds_the_fold_it_asked_for():
    turn = Turn(agent=None, thread_id="t1", resource_id="r1", store=None, input_messages=[])
    turn.info.echoed = 1
    assert turn.memory_report() == {"echoed": 1}
    turn.writes.compaction = CompactionDue(
        through_sequence=12,
        estimated_tokens=6400,
        trigger_tokens=6000,
        keep_tokens=2000,
        model="extractive",
        agent_model="openai/gpt-4o-mini",
    )
    assert turn.memory_report() == {
        "echoed": 1,
        "compaction": {
            "due": True,
            "through_sequence": 12,
            "estimated_tokens": 6400,
            "trigger_tokens": 6000,
            "keep_tokens": 2000,
            "model": "extractive",
            "agent_model": "openai/gpt-4o-mini",
        },
    }
